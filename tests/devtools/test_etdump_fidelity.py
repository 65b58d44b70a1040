"""Our ETDump has the rows ExecuTorch's runtime writes for the same program, and both Inspectors line them up.

A row is (block, event name, chain, instruction id, delegate debug id) of a profile event, or a debug event's
(block, chain, instruction id, shape of the value): every instruction keeps its events, also one whose work was folded at load or
elided into a view. Programs: edgetorch's portable TinyNet and a dynamic-shape MLP (its linear's weight transpose folds), the same
model written by ExecuTorch, and edgetorch's XNNPACK-delegated TinyNet.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.devtools import Inspector
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.format import program as fbp
from edgetorch.format.etdump import deserialize_etdump
from edgetorch.runtime import Runtime
from edgetorch.runtime.etdump import ETDumpGen
from tests.devtools.executorch_inspector import inspect, rows
from tests.devtools.helpers import run_edgetorch, run_executorch
from tests.devtools.models import tinynet
from tests.runtime.edit_program import edgetorch_pte, patched

PROGRAMS = ["edgetorch", "executorch", "xnnpack"]


def _lower(which: str, model: torch.nn.Module, args: tuple):
    """(pte bytes, ETRecord) of ``model`` lowered by edgetorch or by ExecuTorch."""
    ep = torch.export.export(model, args)
    if which == "executorch":
        from executorch.exir import to_edge as executorch_to_edge

        prog = executorch_to_edge(ep, generate_etrecord=True).to_executorch()
    elif which == "xnnpack":
        prog = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], generate_etrecord=True)
        prog = prog.to_executorch()
    else:
        prog = to_edge(ep, generate_etrecord=True).to_executorch()
    return prog.buffer, prog.get_etrecord()


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """Per program: (ETRecord path, our ETDump+buffer, ExecuTorch's ETDump+buffer), two runs each; and what
    ExecuTorch's Inspector makes of each ETDump (one subprocess for all)."""
    found, jobs = {}, []
    for which in PROGRAMS:
        tmp = tmp_path_factory.mktemp(which)
        model, args = tinynet()
        pte, record = _lower(which, model, args)
        record.save(str(tmp / "etrecord.bin"))
        ours, theirs = run_edgetorch(pte, args, tmp), run_executorch(pte, args, tmp)
        found[which] = (tmp / "etrecord.bin", ours, theirs)
        jobs += [(ours[0], tmp / "etrecord.bin", ours[1]), (theirs[0], tmp / "etrecord.bin", theirs[1])]
    seen = iter(inspect(jobs))
    return {which: (*found[which], next(seen), next(seen)) for which in PROGRAMS}


def _rows(path, delegate_events: bool = True) -> list[tuple]:
    out = []
    for run in deserialize_etdump(path.read_bytes()).run_data:
        for e in run.events:
            if (p := e.profile_event) is not None:
                inner = p.delegate_debug_id_int != -1 or p.delegate_debug_id_str is not None
                if delegate_events or not inner:
                    row = (p.name, p.chain_index, p.instruction_id, p.delegate_debug_id_int, p.delegate_debug_id_str)
                    out.append((run.name, *row))
            elif (d := e.debug_event) is not None:
                entry = d.debug_entry
                what = tuple(entry.tensor.sizes) if entry.tensor is not None else int(entry.val)
                out.append((run.name, "debug", d.chain_index, d.instruction_id, what))
    return out


def _delegated(row: list) -> bool:
    """An Inspector row of an event inside a delegate (it has a delegate debug identifier)."""
    return row[4] is not None


@pytest.mark.parametrize("which", ["edgetorch", "executorch"])
def test_portable_programs_write_executorch_rows(traces, which):
    _, ours, theirs, *_ = traces[which]
    got, want = _rows(ours[0]), _rows(theirs[0])
    assert got == want
    operators = {r[3] for r in want if r[1] == "OPERATOR_CALL"}
    assert operators == set(range(6))  # the folded transpose (instruction 4) included


def test_xnnpack_program_writes_executorch_rows_around_the_delegate(traces):
    """Outside the delegate the rows are ExecuTorch's (with a debug event per delegate argument). Inside it,
    ExecuTorch's XNNPACK names its own operators ("Convolution (NHWC, F32) IGEMM #1"); ours log one event per
    node of the delegate, keyed by the debug id the delegate map knows."""
    record, ours, theirs, *_ = traces["xnnpack"]
    assert _rows(ours[0], delegate_events=False) == _rows(theirs[0], delegate_events=False)
    inner = [r for r in _rows(ours[0]) if r[1] != "debug" and r[4] != -1]
    assert len(inner) >= 5 and all(r[2:4] == (0, 0) for r in inner)


@pytest.mark.parametrize("which", ["edgetorch", "executorch"])
def test_executorch_inspector_lines_up_our_events(traces, which):
    """ExecuTorch's Inspector gives each of our events what it gives ExecuTorch's own: handles, ops, values."""
    *_, on_ours, on_theirs = traces[which]
    assert on_ours == on_theirs
    execute = [r for r in on_ours if r[0] == "Execute"]
    assert len(execute) == 2 * 6 + 1 and all(r[3] is not None for r in execute)
    assert all(r[5] for r in execute if "::" not in r[1])  # every instruction event names its Edge ops


def test_executorch_inspector_lines_up_our_delegate_events(traces):
    *_, on_ours, on_theirs = traces["xnnpack"]
    assert [r for r in on_ours if not _delegated(r)] == [r for r in on_theirs if not _delegated(r)]
    inner = [r for r in on_ours if _delegated(r)]
    assert inner and all(r[3] is not None and r[5] for r in inner)


@pytest.mark.parametrize("which", PROGRAMS)
def test_our_inspector_reads_our_etdump_as_executorch_reads_its_own(traces, which):
    """Including the runtime's own events: ``Method::init`` carries instruction 0's debug handles."""
    record, ours, _, on_ours, on_theirs = traces[which]
    mine = rows(Inspector(etdump_path=str(ours[0]), etrecord=str(record), debug_buffer_path=str(ours[1])))
    assert mine == on_ours
    if which != "xnnpack":
        assert mine == on_theirs
    (init,) = [r for r in mine if r[1] == "Method::init"]
    assert init[3] is not None and init[5] == []


class _DynamicMLP(torch.nn.Module):
    """A batch dimension of dynamic size (the executor's value-list mode) and a 0-d intermediate (the sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2 + x.sum()


def test_dynamic_shape_program_writes_executorch_rows(tmp_path):
    torch.manual_seed(0)
    args = (torch.randn(3, 8),)
    batch = torch.export.Dim("batch", min=1, max=16)
    ep = torch.export.export(_DynamicMLP().eval(), args, dynamic_shapes=({0: batch},))
    pte = to_edge(ep).to_executorch().buffer
    assert not Runtime.get().load_program(pte).load_method("forward")._executor.static
    got, want = _rows(run_edgetorch(pte, args, tmp_path)[0]), _rows(run_executorch(pte, args, tmp_path)[0])
    assert got == want
    assert ("Execute", "debug", 0, 3, ()) in want  # the sum's 0-d value keeps its shape


class _Attention(torch.nn.Module):
    """Copies an untraced load elides (squeezes, expands of a chunk) and weight transposes it folds."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.proj = torch.nn.Linear(16, 48), torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).reshape(1, 8, 3, 16).permute(2, 0, 1, 3)
        return torch.relu(self.proj((torch.softmax(q @ k.transpose(-1, -2), -1) @ v).clone()))


def _traced_run(method, x) -> tuple[list[tuple], dict[int, list[np.ndarray]], list[np.ndarray]]:
    gen = ETDumpGen(1 << 22)
    method.set_event_tracer(gen)
    outputs = method.execute([x])
    (run,) = deserialize_etdump(gen.get_etdump_data()).run_data[-1:]
    events = [(p.name, p.instruction_id, p.end_time - p.start_time) for e in run.events if (p := e.profile_event)]
    buffer, values = gen.get_debug_buffer(), {}
    for e in run.events:
        if (d := e.debug_event) is not None and d.chain_index == 0:
            t = d.debug_entry.tensor
            count = int(np.prod(t.sizes))
            values.setdefault(d.instruction_id, []).append(np.frombuffer(buffer, np.float32, count, t.offset))
    return events, values, outputs


def test_elided_and_folded_instructions_report_zero_time_and_their_values():
    """A tracer set after an untraced load finds copies elided and transposes folded: each still reports its
    events, with zero time, and the value it stands for, as a load with the tracer (nothing elided) does."""
    torch.manual_seed(0)
    model, x = _Attention().eval(), torch.randn(1, 8, 16)
    pte = to_edge(torch.export.export(model, (x,))).to_executorch().buffer
    plain = Runtime.get().load_program(pte).load_method("forward")
    executor = plain._executor
    skipped = set(range(len(executor.instructions))) - set(executor.step_pcs)
    assert executor.elided and executor.folded and executor.elided < skipped
    events, values, outputs = _traced_run(plain, x.numpy())
    reference_events, reference_values, _ = _traced_run(Runtime.get().load_program(pte).load_method("forward"), x)
    calls = [(pc, ticks) for name, pc, ticks in events if name == "OPERATOR_CALL"]
    assert [pc for pc, _ in calls] == list(range(len(executor.instructions)))
    assert {pc for pc, ticks in calls if ticks == 0} >= skipped
    assert [e[:2] for e in events] == [e[:2] for e in reference_events]
    assert values.keys() == reference_values.keys()
    for pc, logged in values.items():
        for got, want in zip(logged, reference_values[pc]):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(outputs[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_control_instructions_are_named_as_executorch_names_them():
    def free_at_end(program: fbp.Program) -> None:
        program.execution_plan[0].chains[0].instructions.append(fbp.Instruction(fbp.FreeCall(0)))

    class AddOne(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + 1

    data = patched(edgetorch_pte(AddOne(), (torch.randn(4),)), free_at_end)
    gen = ETDumpGen()
    method = Runtime.get().load_program(data).load_method("forward", event_tracer=gen)
    method.execute([np.zeros(4, np.float32)])
    (run,) = deserialize_etdump(gen.get_etdump_data()).run_data[-1:]
    names = [(e.profile_event.name, e.profile_event.instruction_id) for e in run.events]
    last = len(method.instructions) - 1
    assert names[-3:] == [("OPERATOR_CALL", last - 1), ("FREE_CALL", last), ("Method::execute", 0)]
