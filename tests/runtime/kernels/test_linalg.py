"""Matrix kernels and embedding against torch eager."""

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import call
from tests.runtime.kernels._oracle import check as pool_check

aten = torch.ops.aten

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-12, atol=1e-12),
    torch.float16: dict(rtol=1e-2, atol=1e-2),
    torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
}


def check(result: np.ndarray, expected: torch.Tensor) -> None:
    pool_check(result, expected, tolerances=TOL)


def rand(*shape, dtype=torch.float32):
    return (torch.randn(shape) * (3 if not dtype.is_floating_point else 1)).to(dtype)


DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]


def reference(op, *args, dtype):
    """torch's result computed in float64 (torch has no CPU half/int kernel for every op), cast to ``dtype``."""
    wide = [a.double() if isinstance(a, torch.Tensor) else a for a in args]
    return op(*wide).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_bmm(dtype):
    a, b = rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype)
    expected = reference(aten.mm.default, a, b, dtype=dtype)
    check(call("aten::mm.out", a, b, out_like=expected), expected)
    a, b = rand(4, 5, 7, dtype=dtype), rand(4, 7, 3, dtype=dtype)
    expected = reference(aten.bmm.default, a, b, dtype=dtype)
    check(call("aten::bmm.out", a, b, out_like=expected), expected)


def test_mm_transposed_inputs():
    a, b = rand(7, 5).t(), rand(3, 7).t()
    check(call("aten::mm.out", a, b, out_like=aten.mm(a, b)), aten.mm(a, b))


@pytest.mark.parametrize("name", ["mm", "bmm"])
def test_mm_dtype_out_widens_half(name):
    shape_a, shape_b = ((5, 7), (7, 3)) if name == "mm" else ((2, 5, 7), (2, 7, 3))
    a, b = rand(*shape_a, dtype=torch.float16), rand(*shape_b, dtype=torch.float16)
    expected = getattr(aten, name).default(a.float(), b.float())
    check(call(f"aten::{name}.dtype_out", a, b, 6, out_like=expected), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.5, 2.0), (0, 1), (1, -1.5)])
@pytest.mark.parametrize("bias_shape", [(3,), (1, 3), (5, 3)])
def test_addmm(bias_shape, beta, alpha, dtype):
    bias, a, b = rand(*bias_shape, dtype=dtype), rand(5, 7, dtype=dtype), rand(7, 3, dtype=dtype)
    expected = aten.addmm.default(bias.double(), a.double(), b.double(), beta=beta, alpha=alpha).to(dtype)
    check(call("aten::addmm.out", bias, a, b, beta, alpha, out_like=expected), expected)


def test_addmm_beta_zero_ignores_nan_bias():
    bias, a, b = torch.full((3,), float("nan")), rand(5, 7), rand(7, 3)
    expected = aten.addmm.default(bias, a, b, beta=0)
    check(call("aten::addmm.out", bias, a, b, 0, 1, out_like=expected), expected)


def test_addmm_dtype_out():
    bias, a, b = rand(3, dtype=torch.bfloat16), rand(5, 7, dtype=torch.bfloat16), rand(7, 3, dtype=torch.bfloat16)
    expected = aten.addmm.default(bias.float(), a.float(), b.float(), beta=2, alpha=0.5)
    check(call("aten::addmm.dtype_out", bias, a, b, 6, 2, 0.5, out_like=expected), expected)


@pytest.mark.parametrize("beta,alpha", [(1, 1), (0.25, 3.0)])
def test_baddbmm_addbmm(beta, alpha):
    bias, a, b = rand(4, 5, 3), rand(4, 5, 7), rand(4, 7, 3)
    expected = aten.baddbmm.default(bias, a, b, beta=beta, alpha=alpha)
    check(call("aten::baddbmm.out", bias, a, b, beta, alpha, out_like=expected), expected)
    bias = rand(5, 3)
    expected = aten.addbmm.default(bias, a, b, beta=beta, alpha=alpha)
    check(call("aten::addbmm.out", bias, a, b, beta, alpha, out_like=expected), expected)


@pytest.mark.parametrize(
    "shape_a,shape_b",
    [((7,), (7,)), ((7,), (7, 3)), ((5, 7), (7,)), ((2, 1, 5, 7), (3, 7, 4)), ((2, 5, 7), (7, 4)), ((7,), (2, 7, 3))],
)
def test_matmul(shape_a, shape_b):
    a, b = rand(*shape_a), rand(*shape_b)
    expected = aten.matmul.default(a, b)
    check(call("aten::matmul.out", a, b, out_like=expected), expected)


@pytest.mark.parametrize("name", ["dot", "vdot"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_dot(name, dtype):
    a, b = rand(9, dtype=dtype), rand(9, dtype=dtype)
    expected = getattr(aten, name).default(a.double(), b.double()).to(dtype)
    check(call(f"aten::{name}.out", a, b, out_like=expected), expected)


def test_mv_addmv():
    m, v, bias = rand(5, 7), rand(7), rand(5)
    expected = aten.mv.default(m, v)
    check(call("aten::mv.out", m, v, out_like=expected), expected)
    expected = aten.addmv.default(bias, m, v, beta=0.5, alpha=2)
    check(call("aten::addmv.out", bias, m, v, 0.5, 2, out_like=expected), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("input_shape", [(7,), (5, 7), (2, 3, 7)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear(input_shape, with_bias, dtype):
    x, w = rand(*input_shape, dtype=dtype), rand(4, 7, dtype=dtype)
    b = rand(4, dtype=dtype) if with_bias else None
    expected = aten.linear.default(x.double(), w.double(), None if b is None else b.double()).to(dtype)
    check(call("aten::linear.out", x, w, b, out_like=expected), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("index_shape", [(6,), (2, 3), ()])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_embedding(dtype, index_shape, index_dtype):
    weight = rand(10, 4, dtype=dtype)
    indices = torch.randint(0, 10, index_shape, dtype=index_dtype)
    expected = aten.embedding.default(weight, indices, 0)
    check(call("aten::embedding.out", weight, indices, 0, False, False, out_like=expected), expected)


def test_embedding_rejects_out_of_range_index():
    fn = KERNELS["aten::embedding.out"][0]
    with pytest.raises(IndexError, match=r"\[0, 10\)"):
        fn(np.zeros((10, 4), np.float32), np.array([1, 10]), -1, False, False, np.empty((2, 4), np.float32))
    with pytest.raises(IndexError):
        fn(np.zeros((10, 4), np.float32), np.array([-1]), -1, False, False, np.empty((1, 4), np.float32))
