"""A damaged loop ends at once, a long legitimate one runs (issue 32; runtime/loops.py).

The fuzz campaigns' 19 timeouts (13 distinct files, kept in tests/regressions/fuzz/, from the ``cond`` seed) were
jumps back to a ``cos`` whose condition nothing in the loop changes: the 50,000,000-step cap stopped them only
after about a minute. A run may now take only as many jumps as its loops allow (each loop turns at most the
largest dimension of the method's tensors), so they stop in milliseconds with ExecuTorch's InvalidProgram code,
while ``torch.map`` and ``torch.scan`` over 10,000 rows, and nested maps, run to the end."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch
from functorch.experimental.control_flow import map as torch_map
from torch._higher_order_ops.scan import scan

from edgetorch.errors import EdgetorchError, Error, ExecutionError
from edgetorch.exir import to_edge
from edgetorch.format import program as fbp
from edgetorch.format.pte import load_pte
from edgetorch.runtime import EventTracer, Runtime
from tests.runtime.edit_program import add_value, patched

FUZZ = pathlib.Path(__file__).parent / "fuzz"
# the campaign cases that timed out (seeds 12 and 13): the cond program with a jump back into its false branch
TIMED_OUT = [
    "0a9d25a4af554f28",
    "1415fc87a1fcef41",
    "1d0dace95a4922c6",
    "27132b5c609076cd",
    "2a79321581366cb2",
    "2c2972e21db13ea0",
    "3097e180a8458dbc",
    "37910684bf322ed1",
    "436510158044c87e",
    "5b1621b8c833dcbf",
    "635fa325f08630ac",
    "d34912332790c6ec",
    "f7c6d70ef8a7e06d",
]


def _zeros_for(method) -> list:
    meta = method.metadata
    return [
        np.zeros(tuple(meta.input_tensor_meta(i).sizes()), meta.input_tensor_meta(i).numpy_dtype)
        for i in range(meta.num_inputs())
    ]


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("name", TIMED_OUT)
def test_kept_timeout_stops_with_a_typed_error(name: str):
    data = (FUZZ / f"{name}.pte").read_bytes()
    with pytest.raises(EdgetorchError) as caught:
        method = Runtime.get().load_program(data).load_method("forward")
        method.execute(_zeros_for(method))
    if isinstance(caught.value, ExecutionError) and "jumps in one run" in str(caught.value):
        assert caught.value.code == Error.InvalidProgram
        assert caught.value.instruction is not None and "re-export it" in str(caught.value)


def test_the_cond_case_names_its_budget_and_jump():
    data = (FUZZ / "5b1621b8c833dcbf.pte").read_bytes()
    method = Runtime.get().load_program(data).load_method("forward")
    # 3 jumps, one loop (instructions 6..7), tensors of at most 4 elements a side: 3 * 5 jumps at most
    with pytest.raises(ExecutionError, match=r"more than 15 jumps .* from instruction 7 back to 6") as caught:
        method.execute([np.zeros(4, np.float32)])
    assert caught.value.instruction == 7 and caught.value.code == Error.InvalidProgram


class _Map(torch.nn.Module):
    def forward(self, xs):
        return torch_map(lambda row: row * 2.0 + 1.0, xs)


class _Scan(torch.nn.Module):
    def forward(self, h0, xs):
        return scan(lambda h, x: (h + x, h * 0.5), h0, xs)


class _NestedMap(torch.nn.Module):
    def forward(self, xs):
        return torch_map(lambda plane: torch_map(lambda row: row - 1.0, plane), xs)


def _program(model: torch.nn.Module, args: tuple) -> bytes:
    return to_edge(torch.export.export(model, args)).to_executorch().buffer


@pytest.mark.usefixtures("hang_guard")
def test_map_over_ten_thousand_rows_runs():
    xs = torch.randn(10_000, 2)
    method = Runtime.get().load_program(_program(_Map(), (xs,))).load_method("forward")
    np.testing.assert_allclose(method.execute([xs.numpy()])[0], (xs * 2.0 + 1.0).numpy(), rtol=1e-6)


@pytest.mark.usefixtures("hang_guard")
def test_scan_over_ten_thousand_rows_runs():
    h0, xs = torch.zeros(3), torch.randn(10_000, 3)
    method = Runtime.get().load_program(_program(_Scan(), (h0, xs))).load_method("forward")
    carry, stacked = method.execute([h0.numpy(), xs.numpy()])
    want_carry, want_stacked = _Scan()(h0, xs)
    np.testing.assert_allclose(carry, want_carry.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(stacked, want_stacked.numpy(), rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_nested_maps_run_every_inner_turn(traced: bool):
    """Loops nested two deep turn up to the largest dimension squared: 60 x 50 inner turns here."""
    xs = torch.randn(60, 50, 1)
    method = Runtime.get().load_program(_program(_NestedMap(), (xs,))).load_method("forward")
    if traced:
        method.set_event_tracer(EventTracer())
    np.testing.assert_allclose(method.execute([xs.numpy()])[0], (xs - 1.0).numpy(), rtol=1e-6)


def _counter_stuck(program: fbp.Program) -> None:
    """The map loop's ``index += 1`` becomes ``index += 0``: the counter never reaches the row count."""
    plan = program.execution_plan[0]
    add = next(i for i, op in enumerate(plan.operators) if op.name == "executorch_prim::add")
    ins = next(ins.instr_args for ins in plan.chains[0].instructions if getattr(ins.instr_args, "op_index", -1) == add)
    ins.args[1] = add_value(plan, fbp.Int(0))


@pytest.mark.usefixtures("hang_guard")
@pytest.mark.parametrize("traced", [False, True], ids=["untraced", "traced"])
def test_a_map_whose_counter_never_advances_stops_after_its_rows(traced: bool):
    xs = torch.randn(1_000, 2)
    data = patched(_program(_Map(), (xs,)), _counter_stuck)
    assert any(op.name == "executorch_prim::add" for op in load_pte(data).program.execution_plan[0].operators)
    method = Runtime.get().load_program(data).load_method("forward")
    tracer = EventTracer()
    if traced:
        method.set_event_tracer(tracer)
    with pytest.raises(ExecutionError, match=r"more than 1001 jumps") as caught:
        method.execute([xs.numpy()])
    assert caught.value.code == Error.InvalidProgram
    assert len(tracer.events) > 1001 if traced else not tracer.events
