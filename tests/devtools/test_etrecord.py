"""ETRecord: ours in ExecuTorch's file layout, read by ExecuTorch's parse_etrecord and Inspector, and theirs read by ours."""

from __future__ import annotations

import copy
import json
import zipfile

import pytest
import torch

from edgetorch.devtools import ETRecord, generate_etrecord, parse_etrecord
from edgetorch.exir import to_edge
from tests.devtools.helpers import lower_edgetorch, run_edgetorch
from tests.devtools.models import mixed, tinynet


def _handles(ep) -> dict[str, int]:
    return {n.name: n.meta["debug_handle"] for n in ep.graph.nodes if n.op == "call_function"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("etrecord")
    model, args = tinynet()
    edge, prog = lower_edgetorch(model, args, generate_etrecord=True)
    path = tmp / "etrecord.bin"
    prog.get_etrecord().save(path)
    return model, args, edge, prog, path, tmp


def test_executorch_parses_our_etrecord(recorded):
    from executorch.devtools import parse_etrecord as et_parse

    _, _, edge, prog, path, _ = recorded
    theirs = et_parse(str(path))
    ours, read = _handles(edge.exported_program()), _handles(theirs.edge_dialect_program)
    assert {name: read[name] for name in ours} == ours  # their reader adds getitems for unused outputs
    assert {int(k): v for k, v in theirs._debug_handle_map["forward"].items()} == prog.debug_handle_map["forward"]
    assert theirs.exported_program is not None
    targets = {n.target.__name__ for n in theirs.edge_dialect_program.graph.nodes if n.op == "call_function"}
    assert "aten.convolution.default" in targets  # as ExecuTorch's own Edge operators


def test_executorch_inspector_joins_our_etdump_and_etrecord(recorded):
    from executorch.devtools import Inspector

    model, args, edge, prog, path, tmp = recorded
    etdump, buffer = run_edgetorch(prog.buffer, args, tmp, runs=2)
    inspector = Inspector(etdump_path=str(etdump), etrecord=str(path), debug_buffer_path=str(buffer))
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    (conv,) = [e for e in block.events if e.name == "native_call_convolution.out"]
    assert conv.op_types == ["aten.convolution.default"]
    assert any("models.py" in trace for trace in conv.stack_traces.values())
    assert conv.debug_handles == prog.debug_handle_map["forward"][conv._instruction_id]
    assert inspector.get_exported_program() is not None


def test_our_parse_reads_executorch_etrecord(tmp_path):
    import executorch.exir as et

    model, args = mixed()
    edge = et.to_edge(torch.export.export(model, args), generate_etrecord=True)
    reference = _handles(edge.exported_program())
    edge.to_executorch().get_etrecord().save(tmp_path / "theirs.bin")
    record = parse_etrecord(tmp_path / "theirs.bin")
    assert _handles(record.edge_dialect_program) == reference
    assert record._debug_handle_map["forward"]["0"] == 1 and record.exported_program is not None


def test_generate_etrecord_round_trip_and_errors(tmp_path):
    model, args = mixed()
    ep = torch.export.export(model, args)
    edge = to_edge(ep)
    kept = copy.deepcopy(edge)
    prog = edge.to_executorch()
    path = tmp_path / "r.bin"
    assert generate_etrecord(path, kept, prog, exported_program=ep) is None
    assert zipfile.ZipFile(path).namelist()[0] == "ETRECORD_V0"
    record = parse_etrecord(path)
    assert _handles(record.edge_dialect_program) == _handles(kept.exported_program())
    # the maps come back as JSON gives them, instruction ids as strings (as ExecuTorch's parse_etrecord)
    assert record._debug_handle_map == json.loads(json.dumps(prog.debug_handle_map))
    assert record._delegate_map == {"forward": {}} and record.graph_map == {}
    with pytest.raises(RuntimeError, match="ETRecord was not generated"):
        prog.get_etrecord()
    with pytest.raises(RuntimeError, match="must contain edge dialect program"):
        ETRecord().save(tmp_path / "empty.bin")
    (tmp_path / "junk.bin").write_bytes(b"not a zip")
    with pytest.raises(RuntimeError, match="Invalid etrecord file passed in."):
        parse_etrecord(tmp_path / "junk.bin")
    with zipfile.ZipFile(tmp_path / "bare.zip", "w") as z:
        z.writestr("debug_handle_map", "{}")
    with pytest.raises(RuntimeError, match="ETRecord identifier missing"):
        parse_etrecord(tmp_path / "bare.zip")


def test_etrecord_from_a_bundled_program_records_inputs_and_reference_outputs(tmp_path):
    from executorch.devtools import parse_etrecord as et_parse

    from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite

    model, args = mixed()
    edge = to_edge(torch.export.export(model, args))
    kept = copy.deepcopy(edge)
    cases = [MethodTestCase(inputs=[x], expected_outputs=(model(x),)) for x in (args[0], 2 * args[0], -args[0])]
    bundled = BundledProgram(edge.to_executorch(), [MethodTestSuite("forward", cases)])
    generate_etrecord(tmp_path / "r.bin", kept, bundled)
    for record in (parse_etrecord(tmp_path / "r.bin"), et_parse(str(tmp_path / "r.bin"))):
        # every case's expected outputs; the representative inputs are the first forward case's inputs
        assert len(record._reference_outputs["forward"]) == 3 and len(record._representative_inputs) == 1
        torch.testing.assert_close(record._reference_outputs["forward"][1][0], model(2 * args[0]))
        torch.testing.assert_close(record._representative_inputs[0], args[0])


def test_etrecord_add_methods_follow_executorchs_contract():
    model, args = mixed()
    ep = torch.export.export(model, args)
    edge = to_edge(ep)
    record = ETRecord()
    record.add_exported_program(None)  # nothing to record: stays empty, a later add still works
    assert record.exported_program is None and record.export_graph_id is None
    record.add_exported_program({"forward": ep})
    assert record.exported_program is ep and record.export_graph_id == id(ep.graph)
    with pytest.raises(RuntimeError, match="Exported program already exists in the ETRecord"):
        ETRecord(export_graph_id=1).add_exported_program(ep)
    record.add_edge_dialect_program(edge)  # one method: the program itself, not a dict
    assert record.edge_dialect_program is edge.exported_program()
    with pytest.raises(RuntimeError, match="Edge dialect program already exists in the ETRecord"):
        record.add_edge_dialect_program(edge)
    prog = copy.deepcopy(edge).to_executorch()
    with pytest.raises(RuntimeError, match="reserved name"):
        record.add_extra_export_modules({"my_exported_program": ep})
    with pytest.raises(RuntimeError, match="Unsupported graph module type"):
        record.add_extra_export_modules({"lowered": prog})
    record.add_extra_export_modules({"aten": ep, "edge": edge})
    assert sorted(record.graph_map) == ["aten/forward", "edge/forward"]
    record.add_executorch_program(prog)
    with pytest.raises(RuntimeError, match="Executorch program data already exists in the ETRecord"):
        record.add_executorch_program(prog)
    fresh = record.copy()
    assert fresh.edge_dialect_program is record.edge_dialect_program and fresh._debug_handle_map is None


def test_reference_outputs_and_representative_inputs_of_a_bundled_program():
    from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
    from edgetorch.devtools.etrecord._etrecord import _get_reference_outputs, _get_representative_inputs

    model, args = mixed()
    prog = to_edge(torch.export.export(model, args)).to_executorch()
    cases = [MethodTestCase(inputs=[x], expected_outputs=(model(x),)) for x in (args[0], -args[0])]
    bundled = BundledProgram(prog, [MethodTestSuite("forward", cases)])
    outputs = _get_reference_outputs(bundled)
    assert list(outputs) == ["forward"] and len(outputs["forward"]) == 2
    torch.testing.assert_close(outputs["forward"][1][0], model(-args[0]))
    torch.testing.assert_close(_get_representative_inputs(bundled)[0], args[0])
    record = ETRecord()
    record.update_reference_outputs([outputs["forward"][0]])  # a list is forward's
    assert list(record._reference_outputs) == ["forward"]
    no_outputs = BundledProgram(prog, [MethodTestSuite("forward", [MethodTestCase(inputs=[args[0]])])])
    with pytest.raises(ValueError, match="Missing at least one set of expected outputs for method forward"):
        _get_reference_outputs(no_outputs)


def test_an_exported_program_with_in_place_ops_round_trips(tmp_path):
    """The exported program an ETRecord keeps may be in the TRAINING dialect, in-place ops and all."""
    from edgetorch.exir import to_edge_transform_and_lower

    class MaskInPlace(torch.nn.Module):
        def forward(self, x):
            y = x * 2
            y.masked_fill_(y > 1, 0.0)
            return y

    ep = torch.export.export(MaskInPlace(), (torch.randn(3),))
    assert any("masked_fill_" in str(n.target) for n in ep.graph.nodes)
    edge = to_edge_transform_and_lower(ep)
    path = tmp_path / "etrecord.bin"
    generate_etrecord(path, edge, edge.to_executorch(), exported_program=ep)
    record = parse_etrecord(path)
    kept = record.exported_program
    assert any("masked_fill_" in str(n.target) for n in kept.graph.nodes)


def test_transform_passes_leave_their_graph_in_the_record():
    from torch.fx.passes.infra.pass_base import PassBase, PassResult

    from edgetorch.exir import to_edge_transform_and_lower

    class Mark(PassBase):
        def call(self, graph_module):
            for node in graph_module.graph.nodes:
                node.meta["marked"] = True
            return PassResult(graph_module, True)

    class SinMax(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x).max()

    ep = torch.export.export(SinMax(), (torch.randn(4),))
    record = to_edge_transform_and_lower(ep, transform_passes=[Mark()], generate_etrecord=True)._etrecord
    after = record.graph_map["edge_after_transform/forward"]
    assert any(node.meta.get("marked") for node in after.graph.nodes)
    plain = to_edge_transform_and_lower(ep, generate_etrecord=True)._etrecord
    assert "edge_after_transform/forward" not in (plain.graph_map or {})
