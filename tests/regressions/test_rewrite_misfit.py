"""Load-time rewrites fed programs whose tensors do not fit (issue 32), made by editing a serialized program's
tensor sizes, dtypes or arguments: the direct ufunc and matmul binding of runtime/static_fusion.py, the dynamic
fusions of runtime/fusion.py and the copy elision of runtime/copy_elision.py. Each such program must load, and
then behave as its kernels make it behave (runtime/rewrite_checks.py holds the checks they share): a typed
error with ExecuTorch's InvalidArgument code naming the instruction, or the same values as the unrewritten
steps a traced run takes."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from edgetorch.errors import EdgetorchError, Error, ExecutionError
from edgetorch.exir import to_edge
from edgetorch.format.pte import load_pte, save_pte
from edgetorch.runtime import Runtime


class _Add(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (x * y + y,)


def _program_with_input_sizes(sizes: list[int]) -> bytes:
    """The program of ``_Add`` on (2, 3) inputs with its second input re-declared as ``sizes`` (fewer bytes)."""
    ep = torch.export.export(_Add(), (torch.randn(2, 3), torch.randn(2, 3)))
    pte = load_pte(to_edge(ep).to_executorch().buffer)
    plan = pte.program.execution_plan[0]
    y = plan.values[plan.inputs[1]].val
    y.sizes, y.dim_order = sizes, list(range(len(sizes)))
    return save_pte(pte.program, [bytes(pte.segment(i)) for i in range(len(pte.program.segments))])


def test_static_method_with_unbroadcastable_operands_loads_and_fails_typed():
    method = Runtime.get().load_program(_program_with_input_sizes([4])).load_method("forward")
    with pytest.raises(ExecutionError, match="aten::mul.out"):
        method.execute([np.ones((2, 3), np.float32), np.ones(4, np.float32)])


def test_fitting_edit_still_runs_through_the_rewrites():
    """The control: a size edit that still broadcasts ((3,) against (2, 3)) runs and matches NumPy."""
    method = Runtime.get().load_program(_program_with_input_sizes([3])).load_method("forward")
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1, 2, 3], np.float32)
    (out,) = method.execute([x, y])
    np.testing.assert_allclose(np.asarray(out), x * y + y)


def test_typed_error_says_what_was_found():
    method = Runtime.get().load_program(_program_with_input_sizes([4])).load_method("forward")
    with pytest.raises(EdgetorchError) as info:
        method.execute([np.ones((2, 3), np.float32), np.ones(4, np.float32)])
    assert "(2, 3)" in str(info.value) and "(4,)" in str(info.value)


def _dynamic_program(sizes: list[int], scalar_type: int | None = None) -> bytes:
    """``_Add`` exported with a dynamic batch (its element-wise chain takes runtime/fusion.py's dynamic fusion),
    the second input re-declared as ``sizes`` (and ``scalar_type``, ExecuTorch's ScalarType number)."""
    batch = torch.export.Dim("batch", min=2, max=8)
    ep = torch.export.export(_Add(), (torch.randn(2, 3), torch.randn(2, 3)), dynamic_shapes=({0: batch}, {0: batch}))
    pte = load_pte(to_edge(ep).to_executorch().buffer)
    plan = pte.program.execution_plan[0]
    y = plan.values[plan.inputs[1]].val
    y.sizes, y.dim_order = sizes, list(range(len(sizes)))
    if scalar_type is not None:
        y.scalar_type = scalar_type
    return save_pte(pte.program, [bytes(pte.segment(i)) for i in range(len(pte.program.segments))])


def test_dynamic_fusion_with_unbroadcastable_operands_fails_typed():
    method = Runtime.get().load_program(_dynamic_program([4])).load_method("forward")
    with pytest.raises(ExecutionError, match="aten::mul.out"):
        method.execute([np.ones((2, 3), np.float32), np.ones(4, np.float32)])


def test_dynamic_fusion_with_an_int_operand_matches_numpy():
    """An int32 operand (ScalarType 3) in a float chain: the fusion declines it, the kernels promote it."""
    method = Runtime.get().load_program(_dynamic_program([8, 3], 3)).load_method("forward")
    x, y = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    (out,) = method.execute([x, y])
    np.testing.assert_allclose(np.asarray(out), x * y + y, rtol=1e-6)


def test_operands_numpy_refuses_give_invalid_argument_not_internal():
    """A kernel whose NumPy call refuses the operands (a ValueError) reports InvalidArgument, as ExecuTorch."""
    method = Runtime.get().load_program(_program_with_input_sizes([4])).load_method("forward")
    with pytest.raises(ExecutionError) as info:
        method.execute([np.ones((2, 3), np.float32), np.ones(4, np.float32)])
    assert info.value.code == Error.InvalidArgument


class _Bmm(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.bmm(x, y),)


@pytest.mark.parametrize("sizes", [[2, 6, 5], [1, 4, 5], [4, 5]], ids=["inner", "batch", "rank"])
def test_direct_matmul_binding_refuses_what_bmm_refuses(sizes: list[int]):
    """bmm bound straight to np.matmul: NumPy would broadcast a batch of 1 or a matrix; bmm takes neither."""
    pte = load_pte(
        to_edge(torch.export.export(_Bmm(), (torch.randn(2, 3, 4), torch.randn(2, 4, 5)))).to_executorch().buffer
    )
    plan = pte.program.execution_plan[0]
    y = plan.values[plan.inputs[1]].val
    y.sizes, y.dim_order = sizes, list(range(len(sizes)))
    data = save_pte(pte.program, [bytes(pte.segment(i)) for i in range(len(pte.program.segments))])
    for traced in (False, True):  # the rewritten steps, then the kernels' own
        method = Runtime.get().load_program(data, enable_etdump=traced).load_method("forward")
        with pytest.raises(ExecutionError, match=r"aten::bmm.out.*found \(2, 3, 4\) @ ") as info:
            method.execute([np.ones((2, 3, 4), np.float32), np.ones(sizes, np.float32)])
        assert info.value.code == Error.InvalidArgument


def test_dynamic_fusion_unbroadcastable_operands_say_expected_and_found():
    method = Runtime.get().load_program(_dynamic_program([4])).load_method("forward")
    with pytest.raises(ExecutionError) as info:
        method.execute([np.ones((2, 3), np.float32), np.ones(4, np.float32)])
    assert info.value.code == Error.InvalidArgument and "(2, 3)" in str(info.value) and "(4,)" in str(info.value)


class _Slice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x[:, 2:4] * 2,)


def _run(data: bytes, x: np.ndarray, traced: bool) -> np.ndarray:
    (out,) = Runtime.get().load_program(data, enable_etdump=traced).load_method("forward").execute([x])
    return np.array(out)


def test_copy_elision_keeps_a_slice_whose_result_does_not_fit():
    """A slice_copy whose end no longer matches its planned result ([1, 1] of a [1, 2] slot): elided, it read
    two elements of the input where the kernel writes one; it must keep its kernel, which refuses (as ExecuTorch's
    runtime does) to write a smaller result into the static slot, traced or not."""
    pte = load_pte(to_edge(torch.export.export(_Slice(), (torch.randn(1, 8),))).to_executorch().buffer)
    plan = pte.program.execution_plan[0]
    call = plan.chains[0].instructions[0].instr_args
    assert plan.operators[call.op_index].name == "aten::slice_copy"
    plan.values[call.args[3]].val.int_val = 3  # end 4 -> 3
    data = save_pte(pte.program, [bytes(pte.segment(i)) for i in range(len(pte.program.segments))])
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    for traced in (False, True):
        with pytest.raises(ExecutionError, match=r"slice_copy.* static-shape tensor of shape \[1, 2\]"):
            _run(data, x, traced)


def test_copy_elision_still_elides_a_slice_that_fits():
    """The control: the unedited slice becomes a view, and the result is the slice's."""
    data = to_edge(torch.export.export(_Slice(), (torch.randn(1, 8),))).to_executorch().buffer
    method = Runtime.get().load_program(data).load_method("forward")
    assert method._executor.elided  # noqa: SLF001 - the rewrite under test
    x = np.arange(8, dtype=np.float32).reshape(1, 8)
    np.testing.assert_array_equal(np.asarray(method.execute([x])[0]), x[:, 2:4] * 2)


@pytest.mark.parametrize("name", ["10e120c126613a46", "f1f5215464c71d95"])
def test_max_pool_rewrite_with_a_zero_stride_declines(name: str):
    """Two campaign cases (bench/fuzz.py, from the static-int8 CNN): a max pool whose stride became 0 made the
    pooling rewrite divide by zero at load (ZeroDivisionError); now the rewrite declines and the kernels refuse
    the damaged program with typed errors."""
    data = (pathlib.Path(__file__).parent / "fuzz" / f"{name}.pte").read_bytes()
    with pytest.raises(EdgetorchError):
        method = Runtime.get().load_program(data).load_method("forward")
        meta = method.metadata.input_tensor_meta(0)
        method.execute([np.zeros(tuple(meta.sizes()), meta.numpy_dtype)])
