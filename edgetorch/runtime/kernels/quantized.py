"""Quantization kernels: the ``quantized_decomposed`` ops of ExecuTorch's quantized kernel library.

Affine quantization maps a float ``x`` to ``clamp(round(x / scale) + zero_point, quant_min, quant_max)``
(round half to even, like ``torch.round``) and back with ``(q - zero_point) * scale``; the ops differ in
how scale and zero point are shared (per tensor, per channel along an axis, per token = per row of
the last axis, per group of columns for embedding tables). Each kernel computes in the dtype torch's
reference implementation (``torch.ao.quantization.fx._decomposed``) computes in, so results match
torch bit for bit. Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.promotion import compute_dtype, promote_types
from edgetorch.runtime.kernels.registry import kernel, wrap_dim
from edgetorch.runtime.memory import resize

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_TOKEN_QMIN, _TOKEN_QMAX = -128, 127


def _check_range(quant_min: int, quant_max: int, dtype: np.dtype, op: str) -> None:
    info = np.iinfo(dtype)
    if not info.min <= quant_min <= quant_max <= info.max:
        raise InvalidArgumentError(
            f"{op}: expected {info.min} <= quant_min <= quant_max <= {info.max} for {dtype} output, "
            f"got quant_min={quant_min}, quant_max={quant_max}; pass bounds that fit the quantized dtype"
        )


def _float_input(x: np.ndarray) -> np.ndarray:
    """The input to quantize in the dtype torch quantizes it in: float32, or float64 as it is."""
    return x if x.dtype == _F64 else x.astype(_F32, copy=False)


def _store_quantized(t: np.ndarray, quant_min: int, quant_max: int, out: np.ndarray) -> np.ndarray:
    """Clamp the rounded float values ``t`` (in place) and write them into integer ``out``."""
    np.clip(t, quant_min, quant_max, out=t)
    np.copyto(out, t, casting="unsafe")
    return out


def _scalar_param(t: np.ndarray, what: str, op: str) -> np.generic:
    if t.size != 1:
        raise InvalidArgumentError(f"{op}: expected a one-element {what} tensor, got shape {t.shape}")
    return t.reshape(-1)[0]


# ---------------------------------------------------------------------------------------------
# Per tensor.


def quantize_tensor(
    x: np.ndarray, scale: float, zero_point: int, quant_min: int, quant_max: int, out: np.ndarray
) -> np.ndarray:
    """``x`` quantized with one scale and zero point into ``out`` (resized to ``x``'s shape)."""
    out = resize(out, x.shape)
    _check_range(quant_min, quant_max, out.dtype, "quantize_per_tensor")
    x = _float_input(x)
    t = np.multiply(x, x.dtype.type(1.0 / scale), out=np.empty(x.shape, x.dtype))
    np.rint(t, out=t)
    t += x.dtype.type(zero_point)
    return _store_quantized(t, quant_min, quant_max, out)


@kernel("quantized_decomposed::quantize_per_tensor.out")
def quantize_per_tensor(
    input: np.ndarray, scale: float, zero_point: int, quant_min: int, quant_max: int, dtype: int, out: np.ndarray
) -> np.ndarray:
    """Quantize with a scale and zero point given as numbers."""
    return quantize_tensor(input, scale, zero_point, quant_min, quant_max, out)


@kernel("quantized_decomposed::quantize_per_tensor.Tensor_out")
def quantize_per_tensor_tensor(
    input: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out: np.ndarray,
) -> np.ndarray:
    """Quantize with a scale and zero point given as one-element tensors (e.g. from choose_qparams)."""
    op = "quantize_per_tensor.Tensor_out"
    s, z = float(_scalar_param(scale, "scale", op)), int(_scalar_param(zero_point, "zero_point", op))
    return quantize_tensor(input, s, z, quant_min, quant_max, out)


def dequantize_tensor(q: np.ndarray, scale: float, zero_point: int, out: np.ndarray) -> np.ndarray:
    """``(q - zero_point) * scale`` into float ``out``, computed in ``out``'s dtype (float32 for halves)."""
    out = resize(out, q.shape)
    ct = compute_dtype(out.dtype)
    t = np.array(q, dtype=ct)
    t -= ct.type(zero_point)
    t *= ct.type(scale)
    np.copyto(out, t, casting="unsafe")
    return out


@kernel("quantized_decomposed::dequantize_per_tensor.out")
def dequantize_per_tensor(
    input: np.ndarray,
    scale: float,
    zero_point: int,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out_dtype: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """Dequantize with a scale and zero point given as numbers; ``out`` has the result dtype."""
    return dequantize_tensor(input, scale, zero_point, out)


@kernel("quantized_decomposed::dequantize_per_tensor.Tensor_out")
def dequantize_per_tensor_tensor(
    input: np.ndarray,
    scale: np.ndarray,
    zero_point: np.ndarray,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out_dtype: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """Dequantize with a scale and zero point given as one-element tensors."""
    op = "dequantize_per_tensor.Tensor_out"
    s, z = float(_scalar_param(scale, "scale", op)), int(_scalar_param(zero_point, "zero_point", op))
    return dequantize_tensor(input, s, z, out)


def _affine_min_max(x: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray]:
    """min(x, 0) and max(x, 0) over ``axis``, so that zero is always exactly representable."""
    keep = axis is not None
    lo = np.minimum(np.min(x, axis=axis, keepdims=keep), 0)
    hi = np.maximum(np.max(x, axis=axis, keepdims=keep), 0)
    return lo, hi


@kernel("quantized_decomposed::choose_qparams.Tensor_out")
def choose_qparams(
    input: np.ndarray,
    quant_min: int,
    quant_max: int,
    eps: float,
    dtype: int,
    scale_out: np.ndarray,
    zero_point_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-tensor affine scale and zero point covering [min(x, 0), max(x, 0)] (scale at least ``eps``).

    Computed in float64 like ExecuTorch's kernel (torch's eager op rounds the scale to float32 first).
    """
    if input.size == 0:
        raise InvalidArgumentError(
            "choose_qparams: expected a non-empty input to take the range of, got an empty tensor"
        )
    lo, hi = _affine_min_max(input.astype(_F64, copy=False), None)
    scale = max(float(hi - lo) / (quant_max - quant_min), eps)
    zero_point = min(max(quant_min - round(float(lo) / scale), quant_min), quant_max)
    scale_out, zero_point_out = resize(scale_out, (1,)), resize(zero_point_out, (1,))
    scale_out[0] = scale
    zero_point_out[0] = zero_point
    return scale_out, zero_point_out


# ---------------------------------------------------------------------------------------------
# Per channel and per token: parameters broadcast against the input.


def _channel_view(param: np.ndarray, ndim: int, axis: int) -> np.ndarray:
    shape = [1] * ndim
    shape[axis] = -1
    return param.reshape(shape)


def _token_view(param: np.ndarray, x: np.ndarray, what: str, op: str) -> np.ndarray:
    tokens = x.shape[:-1]
    if param.size != int(np.prod(tokens)):
        raise InvalidArgumentError(f"{op}: expected one {what} per token ({tokens} tokens), got {param.size}")
    return param.reshape(tokens + (1,))


def _quantize_scaled(
    x: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray,
    quant_min: int,
    quant_max: int,
    out: np.ndarray,
    round_first: bool,
) -> np.ndarray:
    """x * (1 / scales), rounded, plus zero_points (torch's per-channel order, or per-token's with
    ``round_first=False``), computed in the promoted dtype of ``x`` and the scales like torch."""
    inverse = np.reciprocal(scales)
    t = np.multiply(x, inverse, out=np.empty(x.shape, promote_types(x.dtype, scales.dtype)))
    if round_first:
        np.rint(t, out=t)
        t += zero_points
    else:
        t += zero_points
        np.rint(t, out=t)
    return _store_quantized(t, quant_min, quant_max, resize(out, x.shape))


@kernel("quantized_decomposed::quantize_per_channel.out")
def quantize_per_channel(
    input: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray,
    axis: int,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out: np.ndarray,
) -> np.ndarray:
    """Quantize with one scale and zero point per index of ``axis``."""
    _check_range(quant_min, quant_max, out.dtype, "quantize_per_channel")
    x = _float_input(input)
    axis = wrap_dim(axis, x.ndim)
    s, z = _channel_view(scales, x.ndim, axis), _channel_view(zero_points, x.ndim, axis)
    return _quantize_scaled(x, s, z, quant_min, quant_max, out, round_first=True)


def _dequantize_scaled(q: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, out: np.ndarray):
    """(q - zero_points) * scales in torch's promoted dtypes, then cast into ``out``."""
    out = resize(out, q.shape)
    if zero_points is not None:
        q = np.subtract(q, zero_points, dtype=promote_types(q.dtype, zero_points.dtype))
    t = np.multiply(q, scales, dtype=promote_types(q.dtype, scales.dtype))
    np.copyto(out, t, casting="unsafe")
    return out


@kernel("quantized_decomposed::dequantize_per_channel.out")
def dequantize_per_channel(
    input: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    axis: int,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out_dtype: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """Dequantize with one scale (and optional zero point) per index of ``axis``."""
    axis = wrap_dim(axis, input.ndim)
    s = _channel_view(scales, input.ndim, axis)
    z = None if zero_points is None else _channel_view(zero_points, input.ndim, axis)
    return _dequantize_scaled(input, s, z, out)


@kernel("quantized_decomposed::quantize_per_token.out")
def quantize_per_token(
    input: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray,
    quant_min: int,
    quant_max: int,
    dtype: int,
    out: np.ndarray,
) -> np.ndarray:
    """Quantize each row of the last axis (a token) with its own scale and zero point."""
    op = "quantize_per_token"
    _check_range(quant_min, quant_max, out.dtype, op)
    s, z = _token_view(scales, input, "scale", op), _token_view(zero_points, input, "zero point", op)
    return _quantize_scaled(input, s, z, quant_min, quant_max, out, round_first=False)


@kernel("quantized_decomposed::dequantize_per_token.out")
def dequantize_per_token(
    input: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray,
    quant_min: int,
    quant_max: int,
    dtype: int,
    output_dtype: int,
    out: np.ndarray,
) -> np.ndarray:
    """Dequantize each row of the last axis with its own scale and zero point."""
    op = "dequantize_per_token"
    s, z = _token_view(scales, input, "scale", op), _token_view(zero_points, input, "zero point", op)
    return _dequantize_scaled(input, s, z, out)


@kernel("quantized_decomposed::choose_qparams_per_token_asymmetric.out")
def choose_qparams_per_token_asymmetric(
    input: np.ndarray, dtype: int, scale_out: np.ndarray, zero_point_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per-token int8 scale and zero point covering each row's [min(x, 0), max(x, 0)].

    The zero point comes from whichever end loses less range to rounding (the XNNPACK rule). Computed
    in float64 like ExecuTorch's kernel (torch's eager op rounds the scale to float32 first).
    """
    x = input.astype(_F64, copy=False)
    lo, hi = _affine_min_max(x, -1)
    scale = (hi - lo) / (_TOKEN_QMAX - _TOKEN_QMIN)
    np.maximum(scale, np.finfo(np.float32).eps, out=scale)
    low_end, high_end = lo / scale, hi / scale
    zero_point = np.where(
        (_TOKEN_QMIN + low_end) + (_TOKEN_QMAX + high_end) > 0, _TOKEN_QMIN - low_end, _TOKEN_QMAX - high_end
    )
    np.clip(zero_point, _TOKEN_QMIN, _TOKEN_QMAX, out=zero_point)
    np.rint(zero_point, out=zero_point)
    shape = x.shape[:-1] + (1,)
    scale_out, zero_point_out = resize(scale_out, shape), resize(zero_point_out, shape)
    np.copyto(scale_out, scale, casting="unsafe")
    np.copyto(zero_point_out, zero_point, casting="unsafe")
    return scale_out, zero_point_out


# ---------------------------------------------------------------------------------------------
# Quantized embedding tables: rows dequantized per group of columns, only the looked-up rows.


def _unpack(weight: np.ndarray, bits: int) -> np.ndarray:
    """Signed values from rows packed ``8 // bits`` to a byte, the first value in the high bits
    for 4-bit tables and in the low bits for 2-bit ones (ExecuTorch's packing), offset-encoded."""
    if bits == 8:
        return weight
    raw = weight.view(np.uint8)
    if bits == 4:
        parts: tuple[np.ndarray, ...] = (raw >> 4, raw & 15)
    else:
        parts = tuple((raw >> shift) & 3 for shift in (0, 2, 4, 6))
    values = np.stack(parts, axis=-1).reshape(raw.shape[:-1] + (-1,)).astype(np.int8)
    values -= np.int8(1 << (bits - 1))
    return values


def _embedding(
    weight: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None,
    indices: np.ndarray,
    bits: int,
    out: np.ndarray,
) -> np.ndarray:
    if weight.ndim != 2 or scales.ndim not in (1, 2) or scales.shape[0] != weight.shape[0]:
        raise InvalidArgumentError(
            f"embedding_{'byte' if bits == 8 else f'{bits}bit'}: expected a 2-D weight and 1-D or 2-D scales "
            f"with one row per weight row, got weight {weight.shape} and scales {scales.shape}"
        )
    rows = _unpack(weight[indices.reshape(-1)], bits)
    groups = 1 if scales.ndim == 1 else scales.shape[1]
    grouped = rows.reshape(rows.shape[0], groups, -1)
    ct = compute_dtype(scales.dtype)
    t = grouped.astype(ct)
    if zero_points is not None:
        t -= zero_points.reshape(zero_points.shape[0], groups)[indices.reshape(-1), :, None].astype(ct)
    t *= scales.reshape(scales.shape[0], groups)[indices.reshape(-1), :, None].astype(ct)
    out = resize(out, indices.shape + (rows.shape[1],))
    # torch dequantizes into the scales' dtype, then converts to the requested one.
    np.copyto(out, t.reshape(out.shape).astype(scales.dtype, copy=False), casting="unsafe")
    return out


def _embedding_kernels(bits: int, name: str) -> None:
    def plain(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, out):
        return _embedding(weight, weight_scales, weight_zero_points, indices, bits, out)

    def with_dtype(weight, weight_scales, weight_zero_points, weight_quant_min, weight_quant_max, indices, dtype, out):
        return _embedding(weight, weight_scales, weight_zero_points, indices, bits, out)

    plain.__doc__ = f"Rows ``indices`` of a {bits}-bit quantized embedding table, dequantized per group of columns."
    with_dtype.__doc__ = plain.__doc__ + " ``out`` has the requested result dtype."
    kernel(f"quantized_decomposed::{name}.out")(plain)
    kernel(f"quantized_decomposed::{name}.dtype_out")(with_dtype)


for _bits, _name in ((8, "embedding_byte"), (4, "embedding_4bit"), (2, "embedding_2bit")):
    _embedding_kernels(_bits, _name)


# ---------------------------------------------------------------------------------------------
# Float activations times int8 weights scaled per row, and the uint8 quantized add.


def _scaled_weight(weight: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, dtype: np.dtype):
    w = weight.astype(dtype)
    if zero_points is not None:
        w -= zero_points.reshape(-1, 1).astype(dtype)
    w *= scales.reshape(-1, 1).astype(dtype)
    return w


@kernel("quantized_decomposed::mixed_mm.out")
def mixed_mm(
    input: np.ndarray,
    weight: np.ndarray,
    weight_scales: np.ndarray,
    weight_zero_points: np.ndarray | None,
    out: np.ndarray,
) -> np.ndarray:
    """input @ W for a (K, N) integer weight with one scale per row K."""
    out = resize(out, (input.shape[0], weight.shape[1]))
    ct = compute_dtype(out.dtype)
    w = _scaled_weight(weight, weight_scales, weight_zero_points, ct)
    np.copyto(out, np.matmul(input.astype(ct, copy=False), w), casting="unsafe")
    return out


@kernel("quantized_decomposed::mixed_linear.out")
def mixed_linear(
    input: np.ndarray,
    weight: np.ndarray,
    weight_scales: np.ndarray,
    weight_zero_points: np.ndarray | None,
    dtype: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """input @ W.T for an (N, K) integer weight with one scale per output row N."""
    out = resize(out, input.shape[:-1] + (weight.shape[0],))
    ct = compute_dtype(out.dtype)
    w = _scaled_weight(weight, weight_scales, weight_zero_points, ct)
    np.copyto(out, np.matmul(input.astype(ct, copy=False), w.T), casting="unsafe")
    return out


@kernel("quantized_decomposed::add.out")
def add(
    a: np.ndarray,
    a_scale: float,
    a_zero_point: int,
    a_quant_min: int,
    a_quant_max: int,
    b: np.ndarray,
    b_scale: float,
    b_zero_point: int,
    b_quant_min: int,
    b_quant_max: int,
    out_scale: float,
    out_zero_point: int,
    out_quant_min: int,
    out_quant_max: int,
    out: np.ndarray,
) -> np.ndarray:
    """Quantized a + b: both dequantized, added in float32, requantized with the output's parameters."""
    shape = np.broadcast_shapes(a.shape, b.shape)
    da = dequantize_tensor(a, a_scale, a_zero_point, np.empty(a.shape, _F32))
    db = dequantize_tensor(b, b_scale, b_zero_point, np.empty(b.shape, _F32))
    total = np.add(da, db)
    return quantize_tensor(total, out_scale, out_zero_point, out_quant_min, out_quant_max, resize(out, shape))
