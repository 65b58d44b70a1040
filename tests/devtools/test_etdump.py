"""ETDump: edgetorch's runtime writes what ExecuTorch's Inspector reads, and reads what ExecuTorch's runtime writes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import ExecutionError
from edgetorch.format.etdump import ValueType, deserialize_etdump, serialize_etdump
from edgetorch.runtime import Module, Runtime
from edgetorch.runtime.etdump import ETDumpGen, EventTracerDebugLogLevel


def _inspector(paths):
    from executorch.devtools import Inspector

    return Inspector(etdump_path=str(paths[0]), debug_buffer_path=str(paths[1]))


def _ops(inspector) -> dict[int, object]:
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    return {e._instruction_id: e for e in block.events if e.name.startswith("native_call_")}


def test_executorch_inspector_reads_our_etdump(traced):
    model, args, prog, _, ours, _ = traced
    inspector = _inspector(ours)
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]  # 3 identical runs: one block
    names = [e.name for e in block.events]
    (execute,) = [e for e in block.events if e.name == "Method::execute"]
    assert len(execute.perf_data.raw) == 3
    ops = _ops(inspector)
    assert ops and all(len(e.perf_data.raw) == 3 and e.perf_data.min >= 0 for e in ops.values())
    assert names.count("OPERATOR_CALL") == len(ops)
    assert "native_call_convolution.out" in names
    torch.testing.assert_close(block.run_output[0], model(*args))
    load = [b for b in inspector.event_blocks if b.name == "Default"][0]
    assert {"Method::init", "Program::load_method"} <= {e.name for e in load.events}


def test_our_intermediate_outputs_match_executorch_runtime(traced):
    """Instruction by instruction, the values in our debug buffer equal those ExecuTorch's runtime logs."""
    *_, ours, theirs = traced
    mine, reference = _ops(_inspector(ours)), _ops(_inspector(theirs))
    assert set(mine) <= set(reference) and len(mine) >= 4
    for pc, event in mine.items():
        assert event.name == reference[pc].name
        got, want = event.debug_data, reference[pc].debug_data
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if w.numel():  # batch norm's saved mean/invstd are empty in inference
                torch.testing.assert_close(g.reshape(w.shape), w, rtol=1e-5, atol=1e-5)


def test_our_reader_reads_executorch_etdump(traced):
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    *_, theirs = traced
    data = theirs[0].read_bytes()
    mine, reference = deserialize_etdump(data), deserialize_from_etdump_flatcc(data)
    assert [r.name for r in mine.run_data] == [r.name for r in reference.run_data]
    for a, b in zip(mine.run_data, reference.run_data):
        assert len(a.events) == len(b.events)
        for x, y in zip(a.events, b.events):
            if y.profile_event is not None:
                p = x.profile_event
                assert (p.name, p.instruction_id, p.start_time, p.end_time) == (
                    y.profile_event.name,
                    y.profile_event.instruction_id,
                    y.profile_event.start_time,
                    y.profile_event.end_time,
                )
            if y.debug_event is not None:
                t, u = x.debug_event.debug_entry.tensor, y.debug_event.debug_entry.tensor
                assert (t.sizes, t.offset) == (u.sizes, u.offset)
    # and what we write from it, ExecuTorch reads back the same
    again = deserialize_from_etdump_flatcc(serialize_etdump(mine))
    assert [r.events for r in again.run_data] == [r.events for r in reference.run_data]


def test_levels_and_no_tracer(traced, tmp_path):
    model, args, prog, *_ = traced
    x = args[0].numpy()
    plain = Runtime.get().load_program(prog.buffer)
    assert not plain.has_etdump()
    outputs_only = ETDumpGen(1 << 20, EventTracerDebugLogLevel.kProgramOutputs)
    plain.load_method("forward", event_tracer=outputs_only).execute([x])
    etdump = deserialize_etdump(outputs_only.get_etdump_data())
    debug = [e.debug_event for e in etdump.run_data[-1].events if e.debug_event is not None]
    (out,) = debug
    assert out.debug_entry.val == ValueType.Tensor and out.debug_entry.output.bool_val
    data = np.frombuffer(outputs_only.get_debug_buffer(), np.float32, 4, out.debug_entry.tensor.offset)
    np.testing.assert_allclose(data, model(*args).detach().numpy().ravel(), rtol=1e-5)
    assert ETDumpGen().get_etdump_data() == b""
    small = ETDumpGen(16)
    with pytest.raises(ExecutionError, match="DebugBufferFullError.*debug_buffer_size"):
        plain.load_method("forward", event_tracer=small).execute([x])


def test_module_event_tracer(traced, tmp_path):
    _, args, prog, *_ = traced
    module = Module(prog.buffer, enable_etdump=True)
    module.forward(args[0].numpy())
    module.forward(args[0].numpy())
    module.write_etdump_result_to_file(tmp_path / "m.etdp")
    names = [r.name for r in deserialize_etdump((tmp_path / "m.etdp").read_bytes()).run_data]
    assert names == ["Default", "Execute", "Execute"] and module.event_tracer().get_num_blocks() == 3
