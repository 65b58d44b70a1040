"""A delegated program traced: the XNNPACK delegate logs one event per node, mapped back to Edge nodes."""

from __future__ import annotations

import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.devtools import Inspector
from edgetorch.exir import to_edge_transform_and_lower
from tests.devtools.helpers import run_edgetorch
from tests.devtools.models import tinynet


def test_xnnpack_node_events_reach_both_inspectors(tmp_path):
    from executorch.devtools import Inspector as ETInspector

    model, args = tinynet()
    ep = torch.export.export(model, args)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], generate_etrecord=True)
    prog = edge.to_executorch()
    etdump, buffer = run_edgetorch(prog.buffer, args, tmp_path, runs=2)
    prog.get_etrecord().save(tmp_path / "etrecord.bin")
    ours = Inspector(etdump_path=str(etdump), etrecord=str(tmp_path / "etrecord.bin"), debug_buffer_path=str(buffer))
    (block,) = [b for b in ours.event_blocks if b.name == "Execute"]
    delegated = [e for e in block.events if e.is_delegated_op]
    assert delegated and all(e.delegate_backend_name == "XnnpackBackend" for e in delegated)
    assert all(len(e.perf_data.raw) == 2 and not e.debug_data for e in delegated)  # no intermediates inside
    op_types = {op for e in delegated for op in e.op_types}
    assert {"aten.convolution.default", "aten.linear.default"} & op_types
    delegate_map = prog.delegate_map["forward"][0]["delegate_map"]
    assert {e.delegate_debug_identifier for e in delegated} == set(delegate_map)
    torch.testing.assert_close(block.run_output[0], model(*args), rtol=1e-4, atol=1e-4)

    theirs = ETInspector(
        etdump_path=str(etdump), etrecord=str(tmp_path / "etrecord.bin"), debug_buffer_path=str(buffer)
    )
    (block,) = [b for b in theirs.event_blocks if b.name == "Execute"]
    reference = sorted(
        (e.delegate_debug_identifier, e.delegate_backend_name, tuple(e.op_types))
        for e in block.events
        if e.is_delegated_op
    )
    assert reference == sorted(
        (e.delegate_debug_identifier, e.delegate_backend_name, tuple(e.op_types)) for e in delegated
    )
