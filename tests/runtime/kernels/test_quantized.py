"""Quantization kernels against torch's ``quantized_decomposed`` reference ops and ExecuTorch's own kernels.

Torch's reference implementations (``torch.ao.quantization.fx._decomposed``, and ExecuTorch's Python
definitions of the embedding ops) are the numerical oracle; where ExecuTorch ships a C++ kernel for the
out variant (``executorch.kernels.quantized``), the result must match that too, since both runtimes run
the same programs.
"""

from __future__ import annotations

import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401  (defines the embedding ops)
import executorch.kernels.quantized  # noqa: F401  (ExecuTorch's C++ out kernels)
import numpy as np
import pytest
import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401

from tests.runtime.kernels._oracle import call as call_kernel
from tests.runtime.kernels.test_elementwise import to_numpy

qd = torch.ops.quantized_decomposed
# ScalarType codes, as ``dtype`` arguments reach kernels.
CODES = {torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4, torch.float16: 5,
         torch.float32: 6, torch.float64: 7, torch.bfloat16: 15}  # fmt: skip
QRANGES = {torch.int8: (-128, 127), torch.uint8: (0, 255), torch.int16: (-32768, 32767), torch.int32: (-1000, 1000)}


def call(name: str, *args, out_like):
    """Run kernel ``name`` with torch dtype arguments passed as ScalarType codes."""
    return call_kernel(name, *(CODES[a] if isinstance(a, torch.dtype) else a for a in args), out_like=out_like)


def same(result: np.ndarray, expected: torch.Tensor, atol: float = 0.0) -> None:
    assert result.shape == tuple(expected.shape)
    assert result.dtype == to_numpy(expected).dtype
    np.testing.assert_allclose(result.astype(np.float64), expected.double().numpy(), rtol=0, atol=atol)


def ties(shape, scale: float, seed: int = 0) -> torch.Tensor:
    """Random floats, a third of them exact halfway points of the scale (where rounding mode shows)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 40 * scale
    halves = (torch.randint(-300, 300, shape, generator=g) + 0.5) * scale
    return torch.where(torch.rand(shape, generator=g) < 0.33, halves, x)


@pytest.mark.parametrize("dtype", list(QRANGES), ids=str)
@pytest.mark.parametrize("shape", [(4, 33), ()], ids=str)
def test_quantize_dequantize_per_tensor(dtype, shape):
    scale, zp = 0.125, 3
    qmin, qmax = QRANGES[dtype]
    x = ties(shape, scale)
    expected = qd.quantize_per_tensor(x, scale, zp, qmin, qmax, dtype)
    q = call("quantized_decomposed::quantize_per_tensor.out", x, scale, zp, qmin, qmax, dtype, out_like=expected)
    same(q, expected)
    back = qd.dequantize_per_tensor(expected, scale, zp, qmin, qmax, dtype)
    args = (expected, scale, zp, qmin, qmax, dtype, None)
    same(call("quantized_decomposed::dequantize_per_tensor.out", *args, out_like=back), back)


def test_quantize_per_tensor_matches_executorch_on_odd_scale():
    x = ties((64, 64), 0.0173, seed=1)
    expected = qd.quantize_per_tensor.out(
        x, 0.0173, -7, -128, 127, torch.int8, out=torch.empty(64, 64, dtype=torch.int8)
    )
    q = call("quantized_decomposed::quantize_per_tensor.out", x, 0.0173, -7, -128, 127, torch.int8, out_like=expected)
    same(q, expected)
    assert torch.equal(expected, qd.quantize_per_tensor(x, 0.0173, -7, -128, 127, torch.int8))


def test_quantize_dequantize_per_tensor_tensor_params():
    x = ties((5, 7), 0.05)
    scale, zp = torch.tensor([0.05], dtype=torch.float64), torch.tensor([-4])
    expected = qd.quantize_per_tensor.tensor(x, scale, zp, -128, 127, torch.int8)
    args = (x, scale, zp, -128, 127, torch.int8)
    same(call("quantized_decomposed::quantize_per_tensor.Tensor_out", *args, out_like=expected), expected)
    back = qd.dequantize_per_tensor.tensor(expected, scale, zp, -128, 127, torch.int8)
    args = (expected, scale, zp, -128, 127, torch.int8, None)
    same(call("quantized_decomposed::dequantize_per_tensor.Tensor_out", *args, out_like=back), back)


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_dequantize_per_tensor_out_dtype(out_dtype):
    q = torch.randint(-128, 128, (6, 9), dtype=torch.int8)
    expected = qd.dequantize_per_tensor(q, 0.37, 5, -128, 127, torch.int8, out_dtype=out_dtype)
    args = (q, 0.37, 5, -128, 127, torch.int8, out_dtype)
    result = call("quantized_decomposed::dequantize_per_tensor.out", *args, out_like=expected)
    same(result, expected, atol=0.0 if out_dtype == torch.float64 else 0.5)


def test_quantize_per_tensor_rejects_bounds_outside_dtype():
    with pytest.raises(ValueError, match="quant_min"):
        call("quantized_decomposed::quantize_per_tensor.out", torch.zeros(3), 0.1, 0, -200, 127, torch.int8,
             out_like=torch.zeros(3, dtype=torch.int8))  # fmt: skip


def test_quantize_per_tensor_float16_input():
    x = ties((3, 10), 0.25).half()
    expected = qd.quantize_per_tensor(x, 0.25, 0, -128, 127, torch.int8)
    same(call("quantized_decomposed::quantize_per_tensor.out", x, 0.25, 0, -128, 127, torch.int8, out_like=expected),
         expected)  # fmt: skip


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float64], ids=str)
def test_quantize_dequantize_per_channel(axis, scale_dtype):
    x = torch.randn(4, 5, 6) * 3
    n = x.shape[axis]
    scales = (torch.rand(n) * 0.1 + 0.01).to(scale_dtype)
    zps = torch.randint(-10, 10, (n,))
    expected = qd.quantize_per_channel(x, scales, zps, axis % 3, -128, 127, torch.int8)
    args = (x, scales, zps, axis, -128, 127, torch.int8)
    same(call("quantized_decomposed::quantize_per_channel.out", *args, out_like=expected), expected)
    for zp in (zps, None):
        back = qd.dequantize_per_channel(expected, scales, zp, axis % 3, -128, 127, torch.int8)
        args = (expected, scales, zp, axis, -128, 127, torch.int8, None)
        same(call("quantized_decomposed::dequantize_per_channel.out", *args, out_like=back), back)


def test_choose_qparams_per_tensor():
    for seed, shift in ((0, 0.0), (1, 3.0), (2, -5.0)):
        x = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed)) + shift
        s, z = torch.empty(1, dtype=torch.float64), torch.empty(1, dtype=torch.int64)
        expected = qd.choose_qparams.Tensor_out(x, -128, 127, 1e-7, torch.int8, scale_out=s, zero_point_out=z)
        reference = qd.choose_qparams.tensor(x, -128, 127, 1e-7, torch.int8)
        result = call("quantized_decomposed::choose_qparams.Tensor_out", x, -128, 127, 1e-7, torch.int8,
                      out_like=expected)  # fmt: skip
        same(result[0], expected[0])  # ExecuTorch's kernel works in float64 ...
        same(result[1], expected[1])
        np.testing.assert_allclose(result[0], reference[0].numpy(), rtol=1.2e-7)  # ... torch's in float32
        same(result[1], reference[1])


def test_per_token_round_trip():
    x = torch.randn(2, 5, 16) * torch.rand(2, 5, 1) * 4 + torch.randn(2, 5, 1)
    scales, zps = qd.choose_qparams_per_token_asymmetric(x, torch.float32)
    outs = (torch.empty_like(scales), torch.empty_like(zps))
    expected_et = qd.choose_qparams_per_token_asymmetric.out(
        x, torch.float32, scale_out=outs[0], zero_point_out=outs[1]
    )
    result = call("quantized_decomposed::choose_qparams_per_token_asymmetric.out", x, torch.float32,
                  out_like=(scales, zps))  # fmt: skip
    same(result[0], expected_et[0])  # float64 like ExecuTorch's kernel; torch rounds to float32 first
    same(result[1], expected_et[1])
    np.testing.assert_allclose(result[0], scales.numpy(), rtol=1.2e-7)
    same(result[1], zps)
    q = qd.quantize_per_token(x, scales, zps, -128, 127, torch.int8)
    args = (x, scales, zps, -128, 127, torch.int8)
    same(call("quantized_decomposed::quantize_per_token.out", *args, out_like=q), q)
    back = qd.dequantize_per_token(q, scales, zps, -128, 127, torch.int8, torch.float32)
    args = (q, scales, zps, -128, 127, torch.int8, torch.float32)
    same(call("quantized_decomposed::dequantize_per_token.out", *args, out_like=back), back)


def _packed_table(bits: int, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Signed ``bits``-bit values and their packing (offset to unsigned, first value high for 4-bit)."""
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    values = torch.randint(lo, hi + 1, (rows, cols), dtype=torch.int8)
    if bits == 8:
        return values, values
    u = (values.to(torch.int16) - lo).to(torch.uint8)
    if bits == 4:
        return values, (u[:, 0::2] << 4) | u[:, 1::2]
    return values, u[:, 0::4] | (u[:, 1::4] << 2) | (u[:, 2::4] << 4) | (u[:, 3::4] << 6)


EMBEDDINGS = {8: ("embedding_byte", -128, 127), 4: ("embedding_4bit", -8, 7), 2: ("embedding_2bit", -2, 1)}


@pytest.mark.parametrize("bits", list(EMBEDDINGS))
@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("with_zero_points", [False, True])
def test_quantized_embedding(bits, groups, with_zero_points):
    name, qmin, qmax = EMBEDDINGS[bits]
    values, packed = _packed_table(bits, 10, 16)
    scales = torch.rand(10, groups) + 0.1 if groups > 1 else torch.rand(10) + 0.1
    zps = torch.randint(-3, 3, scales.shape).float() if with_zero_points else None
    indices = torch.tensor([[1, 9, 0], [3, 3, 7]])
    expected = getattr(qd, name)(packed, scales, zps, qmin, qmax, indices)
    dense = (values.float().reshape(10, groups, -1) - (0 if zps is None else zps.reshape(10, groups, 1))) * (
        scales.reshape(10, groups, 1)
    )
    torch.testing.assert_close(expected, dense.reshape(10, 16)[indices])  # the packing is ExecuTorch's
    result = call(f"quantized_decomposed::{name}.out", packed, scales, zps, qmin, qmax, indices, out_like=expected)
    same(result, expected)
    half = getattr(qd, name).dtype(packed, scales.half(), None if zps is None else zps.half(), qmin, qmax, indices,
                                   dtype=torch.float32)  # fmt: skip
    args = (packed, scales.half(), None if zps is None else zps.half(), qmin, qmax, indices, torch.float32)
    same(call(f"quantized_decomposed::{name}.dtype_out", *args, out_like=half), half, atol=1e-2)


def test_mixed_linear_and_mm_match_executorch():
    x = torch.randn(3, 8)
    w = torch.randint(-128, 128, (10, 8), dtype=torch.int8)
    scales = torch.rand(10)
    expected = qd.mixed_linear.out(x, w, scales, None, None, out=torch.empty(3, 10))
    result = call("quantized_decomposed::mixed_linear.out", x, w, scales, None, None, out_like=expected)
    np.testing.assert_allclose(result, expected.numpy(), rtol=1e-5, atol=1e-4)
    wm, sm = torch.randint(-128, 128, (8, 10), dtype=torch.int8), torch.rand(8)
    expected = qd.mixed_mm.out(x, wm, sm, None, out=torch.empty(3, 10))
    result = call("quantized_decomposed::mixed_mm.out", x, wm, sm, None, out_like=expected)
    np.testing.assert_allclose(result, expected.numpy(), rtol=1e-5, atol=1e-4)


def test_quantized_add_matches_executorch():
    a = torch.randint(0, 256, (4, 6), dtype=torch.uint8)
    b = torch.randint(0, 256, (4, 6), dtype=torch.uint8)
    params = (0.05, 128, 0, 255, b, 0.03, 100, 0, 255, 0.07, 110, 0, 255)
    expected = qd.add.out(a, *params, out=torch.empty(4, 6, dtype=torch.uint8))
    reference = qd.quantize_per_tensor(
        qd.dequantize_per_tensor(a, 0.05, 128, 0, 255, torch.uint8)
        + qd.dequantize_per_tensor(b, 0.03, 100, 0, 255, torch.uint8),
        0.07, 110, 0, 255, torch.uint8,
    )  # fmt: skip
    assert (expected.int() - reference.int()).abs().max() <= 1
    same(call("quantized_decomposed::add.out", a, *params, out_like=expected), expected)
