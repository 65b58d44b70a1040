"""Two defects of damaged programs noticed in the fuzz campaigns (issue 32), made here by editing a real program.

* A None (a Null value) where a kernel needs a tensor: the static-int8 CNN's ``quantize_per_tensor`` raised
  AttributeError on it, reported as an ExecutionError with code Internal. Loading the method now refuses it
  with a ProgramLoadError (InvalidProgram) naming the instruction, the operator and the argument. The same holds
  for a None where the kernel needs a scalar, a dim or a size (its ``scale``, ``zero_point``), which raised
  TypeError with code Internal.
* A kernel of a static method (every tensor static) writing fewer elements than its output holds: the rest of
  the slot kept stale values and the method returned them. As ExecuTorch's runtime refuses to resize a static
  tensor, the run now fails with NotSupported naming the instruction; dynamic-shape outputs still shrink."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import Error, ExecutionError, ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.runtime import Runtime
from edgetorch.runtime.memory import StaticResizeError
from tests.runtime.edit_program import add_value, edgetorch_pte, patched


class _QuantizeRelu(torch.nn.Module):
    def forward(self, x):
        q = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.05, 3, -128, 127, torch.int8)
        return torch.ops.quantized_decomposed.dequantize_per_tensor(q, 0.05, 3, -128, 127, torch.int8).relu()


def _int8_program() -> bytes:
    import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers quantized_decomposed)

    return edgetorch_pte(_QuantizeRelu(), (torch.randn(2, 5),))


def _none_into(op_name: str, position: int, whole_value: bool):
    """An edit making argument ``position`` of the first ``op_name`` call None: the instruction passes a new Null
    value, or (``whole_value``) the value it passes becomes Null for every instruction reading it."""

    def edit(program: fbp.Program) -> None:
        plan = program.execution_plan[0]
        ins = next(
            i.instr_args
            for i in plan.chains[0].instructions
            if isinstance(i.instr_args, fbp.KernelCall) and plan.operators[i.instr_args.op_index].name == op_name
        )
        if whole_value:
            plan.values[ins.args[position]] = fbp.EValue(fbp.Null())
        else:
            ins.args[position] = add_value(plan, fbp.Null())

    return edit


@pytest.mark.parametrize("whole_value", [False, True], ids=["argument", "value"])
@pytest.mark.parametrize(
    ("op_name", "position", "argument"),
    [
        ("quantized_decomposed::quantize_per_tensor", 0, "input"),
        ("quantized_decomposed::quantize_per_tensor", 6, "out"),
        ("quantized_decomposed::dequantize_per_tensor", 7, "out"),
        ("aten::relu", 0, "self"),
        ("quantized_decomposed::quantize_per_tensor", 1, "scale"),
        ("quantized_decomposed::quantize_per_tensor", 2, "zero_point"),
    ],
)
def test_none_where_a_kernel_needs_a_value_is_refused_at_load(op_name, position, argument, whole_value):
    data = patched(_int8_program(), _none_into(op_name, position, whole_value))
    program = Runtime.get().load_program(data)
    # a Null value read by several instructions is refused at the first (relu's input is dequantize's out)
    expected = r"passes value \d+, which is None" if whole_value else rf"\({op_name}\.out\) .* argument '{argument}'"
    with pytest.raises(ProgramLoadError, match=rf"instruction \d+ .*{expected}") as e:
        program.load_method("forward")
    assert e.value.code == Error.InvalidProgram


def test_the_int8_program_runs_undamaged():
    x = torch.randn(2, 5)
    got = Runtime.get().load_program(_int8_program()).load_method("forward").execute([x.numpy()])
    np.testing.assert_allclose(got[0], _QuantizeRelu()(x).numpy(), atol=1e-6)


class _RowSums(torch.nn.Module):
    def forward(self, x):
        return (x + 1).sum(dim=1)


def _sum_over_all_dims(program: fbp.Program) -> None:
    """``sum(dim=[1])`` becomes ``sum(dim=[0, 1])``: one element written into the planned 4-element output."""
    plan = program.execution_plan[0]
    for ins in plan.chains[0].instructions:
        a = ins.instr_args
        if isinstance(a, fbp.KernelCall) and plan.operators[a.op_index].name == "aten::sum":
            a.args[1] = add_value(plan, fbp.IntList([add_value(plan, fbp.Int(0)), add_value(plan, fbp.Int(1))]))


@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_a_smaller_result_into_a_static_output_is_refused(traced: bool):
    data = patched(edgetorch_pte(_RowSums(), (torch.randn(4, 8),)), _sum_over_all_dims)
    method = Runtime.get().load_program(data).load_method("forward")
    if traced:
        from edgetorch.runtime import EventTracer

        method.set_event_tracer(EventTracer())
    with pytest.raises(ExecutionError, match=r"aten::sum\.IntList_out.*static-shape tensor of shape \[4\]") as e:
        method.execute([np.ones((4, 8), np.float32)])  # it used to return [64, 0, 0, 0]: three stale elements
    assert isinstance(e.value.__cause__, StaticResizeError) and e.value.code == Error.NotSupported


def test_a_dynamic_output_still_shrinks():
    n = torch.export.Dim("n", min=1, max=8)
    ep = torch.export.export(_RowSums(), (torch.randn(8, 3),), dynamic_shapes=({0: n},))
    from edgetorch.exir import to_edge

    method = Runtime.get().load_program(to_edge(ep).to_executorch().buffer).load_method("forward")
    for rows in (8, 3, 1):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        np.testing.assert_allclose(method.execute([x])[0], (x + 1).sum(1))
