"""Failures while a method runs: every kernel or delegate failure is an ExecutionError naming the instruction and
operator, a bad ``dim`` is one error type in every kernel family, and a runaway loop is stopped in traced and
untraced runs alike."""

from __future__ import annotations

import pathlib
import re

import numpy as np
import pytest
import torch

import edgetorch
from edgetorch.errors import DelegateLoadError, Error, ExecutionError, OutOfRangeError
from edgetorch.format import program as fbp
from edgetorch.format.pte import load_pte
from edgetorch.runtime import BackendInterface, EventTracer, Runtime
from edgetorch.runtime import backends as backends_module
from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.edit_program import add_value, edgetorch_pte, patched


class AddOne(torch.nn.Module):
    def forward(self, x):
        return x + 1


def _loop_forever(program: fbp.Program) -> None:
    """After the method's kernels, jump back to instruction 0 unconditionally (a condition that is always False)."""
    plan = program.execution_plan[0]
    never = add_value(plan, fbp.Bool(False))
    plan.chains[0].instructions.append(fbp.Instruction(fbp.JumpFalseCall(never, 0)))


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_a_runaway_loop_is_stopped(traced):
    data = patched(edgetorch_pte(AddOne(), (torch.randn(4),)), _loop_forever)
    method = Runtime().load_program(data).load_method("forward")
    tracer = EventTracer()
    if traced:
        method.set_event_tracer(tracer)
    # one jump, one loop, tensors of 4 elements: a run may jump 1 * (4 + 1) times (runtime/loops.py)
    with pytest.raises(ExecutionError, match="took more than 5 jumps in one run") as caught:
        method.execute([np.zeros(4, np.float32)])
    assert caught.value.code == Error.InvalidProgram
    assert len(tracer.events) > 5 if traced else not tracer.events


class AddThenSum(torch.nn.Module):
    def forward(self, x):
        return (x + 1).sum(dim=1)


class SumOfWeightPlusInput(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(2, 3))

    def forward(self, x):
        return self.w.sum(dim=1) + x


def _call_of(plan: fbp.ExecutionPlan, op_name: str) -> int:
    """The index of the one instruction of ``plan`` that calls operator ``op_name``."""
    (op_index,) = [i for i, op in enumerate(plan.operators) if op.name == op_name]
    instructions = plan.chains[0].instructions
    (pc,) = [pc for pc, c in enumerate(instructions) if getattr(c.instr_args, "op_index", None) == op_index]
    return pc


def _sum_dim_to(dim: int):
    """An edit that makes the method's ``sum`` reduce over ``dim`` (its IntList ``dim`` argument)."""

    def edit(program: fbp.Program) -> None:
        plan = program.execution_plan[0]
        call = plan.chains[0].instructions[_call_of(plan, "aten::sum")].instr_args
        plan.values[call.args[1]].val = fbp.IntList([add_value(plan, fbp.Int(dim))])

    return edit


def _free_at_end(program: fbp.Program) -> None:
    """A trailing FreeCall: the method then runs in the executor's dynamic (value-list) mode."""
    program.execution_plan[0].chains[0].instructions.append(fbp.Instruction(fbp.FreeCall(0)))


def _executed(data: bytes, traced: bool, x: np.ndarray) -> None:
    method = Runtime().load_program(data).load_method("forward")
    if traced:
        method.set_event_tracer(EventTracer())
    method.execute([x])


@pytest.mark.parametrize("mode", ["static", "dynamic", "traced"])
def test_a_kernel_error_names_the_instruction_and_operator(mode):
    data = patched(edgetorch_pte(AddThenSum(), (torch.randn(2, 3),)), _sum_dim_to(5))
    if mode == "dynamic":
        data = patched(data, _free_at_end)
    with pytest.raises(ExecutionError) as info:
        _executed(data, mode == "traced", np.ones((2, 3), np.float32))
    err, pc = info.value, _call_of(load_pte(data).program.execution_plan[0], "aten::sum")
    assert (err.instruction, err.operator) == (pc, "aten::sum.IntList_out")
    assert isinstance(err.__cause__, OutOfRangeError)
    assert f"instruction {pc} (aten::sum.IntList_out)" in str(err) and "dimension 5 is out of range" in str(err)


def test_a_kernel_that_fails_while_folding_at_load_fails_at_its_instruction_when_run():
    model = SumOfWeightPlusInput()
    data = patched(edgetorch_pte(model, (torch.randn(2),)), _sum_dim_to(-3))
    method = Runtime().load_program(data).load_method("forward")
    assert method._executor.folded == 0
    with pytest.raises(ExecutionError, match=r"\(aten::sum.IntList_out\).*dimension -3") as info:
        method.execute([np.ones(2, np.float32)])
    assert info.value.instruction == _call_of(load_pte(data).program.execution_plan[0], "aten::sum")
    assert isinstance(info.value.__cause__, OutOfRangeError)


class _Failing(BackendInterface):
    def __init__(self, fail_in: str):
        self.fail_in = fail_in

    def init(self, processed, compile_specs, named_data):
        if self.fail_in == "init":
            raise KeyError("no such node")
        return bytes(processed)

    def execute(self, handle, args):
        raise ValueError(f"cannot run blob {handle!r}")


def _delegate_instead_of_add(program: fbp.Program) -> None:
    """Replace the method's add with a call to delegate 0 of backend FailingTestBackend."""
    plan = program.execution_plan[0]
    program.backend_delegate_data.append(fbp.BackendDelegateInlineData(b"blob"))
    plan.delegates.append(fbp.BackendDelegate("FailingTestBackend", fbp.BackendDelegateDataReference(index=0), []))
    pc = _call_of(plan, "aten::add")
    add = plan.chains[0].instructions[pc].instr_args
    plan.chains[0].instructions[pc] = fbp.Instruction(fbp.DelegateCall(0, [add.args[0], add.args[-1]]))


@pytest.mark.parametrize("mode", ["static", "dynamic", "traced"])
def test_a_delegate_error_names_the_instruction_and_backend(mode, monkeypatch):
    monkeypatch.setitem(backends_module._BACKENDS, "FailingTestBackend", _Failing("execute"))
    data = patched(edgetorch_pte(AddThenSum(), (torch.randn(2, 3),)), _delegate_instead_of_add)
    if mode == "dynamic":
        data = patched(data, _free_at_end)
    pc = [
        i
        for i, c in enumerate(load_pte(data).program.execution_plan[0].chains[0].instructions)
        if isinstance(c.instr_args, fbp.DelegateCall)
    ]
    with pytest.raises(ExecutionError, match=r"\(delegate FailingTestBackend\).*cannot run blob") as info:
        _executed(data, mode == "traced", np.ones((2, 3), np.float32))
    assert [info.value.instruction] == pc and isinstance(info.value.__cause__, ValueError)


def test_a_delegate_that_fails_to_initialise_is_a_delegate_load_error(monkeypatch):
    monkeypatch.setitem(backends_module._BACKENDS, "FailingTestBackend", _Failing("init"))
    data = patched(edgetorch_pte(AddThenSum(), (torch.randn(2, 3),)), _delegate_instead_of_add)
    with pytest.raises(DelegateLoadError, match="FailingTestBackend.*delegate 0.*KeyError.*no such node"):
        Runtime().load_program(data).load_method("forward")


X = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
I64 = np.zeros((2, 3, 4), np.int64)
OUT = np.zeros((2, 3, 4), np.float32)
SCALE, ZERO = np.ones(3, np.float32), np.zeros(3, np.int64)

# One operator per kernel family that takes a dim, called with dim 7 on a 3-D tensor.
BAD_DIM_CALLS = {
    "aten::sum.IntList_out": (X, [7], False, None, OUT),
    "aten::amax.out": (X, [7], False, OUT),
    "aten::cumsum.out": (X, 7, None, OUT),
    "aten::_softmax.out": (X, 7, False, OUT),
    "aten::_log_softmax.out": (X, 7, False, OUT),
    "aten::sort.values": (X, 7, False, OUT, I64.copy()),
    "aten::topk.values": (X, 1, 7, True, True, OUT, I64.copy()),
    "aten::cat.out": ([X, X], 7, OUT),
    "aten::transpose_copy.int_out": (X, 0, 7, OUT),
    "aten::gather.out": (X, 7, I64, False, OUT),
    "aten::index_select.out": (X, 7, np.zeros(1, np.int64), OUT),
    "quantized_decomposed::quantize_per_channel.out": (X, SCALE, ZERO, 7, -128, 127, 1, OUT.astype(np.int8)),
    "aten::sym_size.int": (X, 7),
    "aten::sym_stride.int": (X, 7),
}


@pytest.mark.parametrize("name", sorted(BAD_DIM_CALLS))
def test_a_bad_dim_is_the_same_error_in_every_kernel_family(name):
    fn, _nargs = KERNELS[name]
    with pytest.raises(OutOfRangeError, match=r"dimension 7 is out of range for a 3-D tensor"):
        fn(*BAD_DIM_CALLS[name])


def test_dims_are_checked_in_one_place():
    package = pathlib.Path(edgetorch.__file__).parent
    defined = [p for p in package.rglob("*.py") if re.search(r"^def (_?wrap_dim|_wrap_axis)\b", p.read_text(), re.M)]
    assert [p.relative_to(package).as_posix() for p in defined] == ["runtime/kernels/registry.py"]
