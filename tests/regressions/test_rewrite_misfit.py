"""Load-time rewrites fed programs whose tensors do not fit (issue 32): a static method whose ``aten::add.out``
operands do not broadcast, made by editing a serialized program's tensor sizes. The direct ufunc binding of
runtime/static_fusion.py used to call ``np.broadcast_shapes`` at load and let its ``ValueError`` out; the
program must load, and running it must fail with the typed error the add kernel raises, naming the instruction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import EdgetorchError, ExecutionError
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
