"""Custom operators end to end: ``torch.library.custom_op`` -> to_edge -> to_executorch -> a NumPy kernel.

As in ExecuTorch, a custom op reaches the runtime as its out variant: the user
defines ``ns::op`` (with a fake kernel for export) and ``ns::op.out`` (same
arguments plus a keyword-only ``out``), and registers the runtime kernel under
``"ns::op.out"``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime, UnsupportedOperatorError, register_kernel
from edgetorch.runtime.kernels.registry import KERNELS

OUT_NAME = "edgetorch_test::scaled_add.out"


@torch.library.custom_op("edgetorch_test::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x + alpha * y


@scaled_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return torch.empty_like(x)


torch.library.define(OUT_NAME, "(Tensor x, Tensor y, float alpha, *, Tensor(a!) out) -> Tensor(a!)")


@torch.library.impl(OUT_NAME, "CompositeExplicitAutograd")
def _(x: torch.Tensor, y: torch.Tensor, alpha: float, out: torch.Tensor) -> torch.Tensor:
    return out.copy_(x + alpha * y)


@torch.library.custom_op("edgetorch_test::no_out_variant", mutates_args=())
def no_out_variant(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@no_out_variant.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustom(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.edgetorch_test.scaled_add(x, y, 0.5).relu()


def scaled_add_kernel(x: np.ndarray, y: np.ndarray, alpha: float, out: np.ndarray) -> np.ndarray:
    np.multiply(y, alpha, out=out)
    return np.add(out, x, out=out)


@pytest.fixture
def kernel_registered():
    register_kernel(OUT_NAME, scaled_add_kernel)
    yield
    KERNELS.pop(OUT_NAME, None)


@pytest.fixture(scope="module")
def args() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(3, 4)


@pytest.fixture(scope="module")
def pte(args) -> bytes:
    ep = torch.export.export(UsesCustom(), args, strict=False)
    return to_edge(ep).to_executorch().buffer


def test_custom_op_survives_lowering_as_its_out_variant(pte):
    assert Runtime.get().load_program(pte).operators("forward") == [OUT_NAME, "aten::relu.out"]


def test_registered_numpy_kernel_runs_custom_op(pte, args, kernel_registered):
    method = Runtime.get().load_program(pte).load_method("forward")
    (got,) = method.execute([a.numpy() for a in args])
    np.testing.assert_allclose(got, UsesCustom()(*args).numpy(), rtol=1e-6, atol=1e-6)


def test_unregistered_custom_op_fails_at_load_method(pte):
    KERNELS.pop(OUT_NAME, None)
    program = Runtime.get().load_program(pte)
    with pytest.raises(UnsupportedOperatorError) as err:
        program.load_method("forward")
    assert OUT_NAME in str(err.value)
    assert "register_kernel" in str(err.value)


def test_custom_op_without_out_variant_is_refused_by_the_compiler():
    class M(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.edgetorch_test.no_out_variant(x)

    edge = to_edge(torch.export.export(M(), (torch.randn(2),), strict=False))
    with pytest.raises(UnsupportedOperatorError, match="edgetorch_test::no_out_variant.*out"):
        edge.to_executorch()
