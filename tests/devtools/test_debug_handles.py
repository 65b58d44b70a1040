"""Debug handles: numbered as ExecuTorch's to_edge numbers them, mapped per instruction as its emitter maps them."""

from __future__ import annotations

import pytest
import torch

from edgetorch.exir import to_edge, to_edge_transform_and_lower
from tests.devtools.models import mixed, tinynet


def _handles(ep) -> dict[str, int]:
    return {n.name: n.meta["debug_handle"] for n in ep.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("make", [mixed, tinynet])
def test_edge_debug_handles_and_map_match_executorch(make):
    import executorch.exir as et

    model, args = make()
    ours = to_edge(torch.export.export(model, args))
    theirs = et.to_edge(torch.export.export(model, args))
    assert _handles(ours.exported_program()) == _handles(theirs.exported_program())
    assert len(set(_handles(ours.exported_program()).values())) < len(_handles(ours.exported_program()))
    ours_et, theirs_et = ours.to_executorch(), theirs.to_executorch()
    assert ours_et.debug_handle_map == theirs_et.debug_handle_map
    assert ours_et.instruction_id_to_num_outs_map == {"forward": {}}
    assert ours_et.delegate_map == {"forward": {}}


def test_delegate_instruction_maps_to_the_handles_it_consumed():
    from edgetorch.backends.xnnpack import XnnpackPartitioner

    model, args = tinynet()
    edge = to_edge_transform_and_lower(torch.export.export(model, args), partitioner=[XnnpackPartitioner()])
    lowered = [m for name, m in edge.exported_program().graph_module.named_children() if name.startswith("lowered")]
    inside = sorted(n.meta["debug_handle"] for n in lowered[0].original_module.graph.nodes if n.op == "call_function")
    prog = edge.to_executorch()
    (pc, entry), *_ = prog.delegate_map["forward"].items()
    assert entry["name"] == "XnnpackBackend" and entry["delegate_map"]
    assert sorted(prog.debug_handle_map["forward"][pc]) == inside
    assert prog.instruction_id_to_num_outs_map["forward"][pc] == 1
    handles = {h for hs in entry["delegate_map"].values() for h in hs}
    assert handles <= set(inside)
