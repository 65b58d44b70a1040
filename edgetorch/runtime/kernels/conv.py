"""Convolution kernels (1-d/2-d/3-d, grouped, depthwise, transposed), im2col/col2im and pixel (un)shuffle.

A convolution is im2col (the op layer's, edgetorch/runtime/ops/conv.py) + one batched ``np.matmul``: the
column matrix is multiplied by the weight for every group at once. Pointwise
convolutions skip the column matrix; depthwise ones are the op layer's (edgetorch/runtime/ops/conv.py). Padded
inputs and columns are scratch arrays reused from call to call.
Transposed convolution is the matmul followed by col2im (one strided add per tap). The window helpers here are
shared with the pooling kernels. Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.linalg import LOW_PRECISION, store, upcast
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.kernels.scratch import scratch
from edgetorch.runtime.memory import resize
from edgetorch.runtime.ops import conv as conv_op
from edgetorch.runtime.ops import window
from edgetorch.runtime.ops.conv import padded, window_view
from edgetorch.runtime.ops.window import expand

__all__ = ["padded", "window_view"]  # shared with the pooling and backward kernels


def tap_slices(
    tap: Sequence[int], stride: Sequence[int], dilation: Sequence[int], out_sizes: Sequence[int]
) -> tuple[slice, ...]:
    """The strided slices of a padded input that kernel position ``tap`` reads for every output position."""
    return tuple(slice(k * dl, k * dl + (n - 1) * st + 1, st) for k, st, dl, n in zip(tap, stride, dilation, out_sizes))


def compute_target(out: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``out`` when results can be written straight into it, else a scratch array in the compute ``dtype``."""
    if out.dtype == dtype and out.flags.c_contiguous:
        return out
    return np.empty(out.shape, dtype)


def _compute_dtype(x: np.ndarray) -> np.dtype:
    return np.dtype(np.float32) if x.dtype in LOW_PRECISION else x.dtype


def _add_bias(target: np.ndarray, bias: np.ndarray | None) -> None:
    if bias is not None:
        np.add(target, upcast(bias).reshape((-1,) + (1,) * (target.ndim - 2)), out=target, casting="unsafe")


def _columns(
    x: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    out_sizes: Sequence[int],
) -> np.ndarray:
    """The op layer's im2col of ``x``: ``(N, C, *kernel, *out_sizes)``, in a scratch array (valid until the
    calling kernel returns)."""
    cols = scratch("conv.columns", x.shape[:2] + tuple(kernel) + tuple(out_sizes), _compute_dtype(x))
    for step in conv_op.im2col(x, cols, kernel, stride, [(p, p) for p in padding], dilation, "NCHW"):
        step()
    return cols


def _conv_forward(
    x: np.ndarray,
    w: np.ndarray,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    target: np.ndarray,
) -> None:
    d = w.ndim - 2
    n, c = x.shape[:2]
    kernel, out_sizes = w.shape[2:], target.shape[2:]
    if groups > 1 and groups == c and w.shape[1] == 1:
        for step in conv_op.depthwise(x, w, None, target, stride, [(p, p) for p in padding], dilation, "NCHW"):
            step()
        return
    cg, og, taps = c // groups, w.shape[0] // groups, math.prod(kernel)
    if taps == 1:
        extent = [window.reach(o, k, s, dl) for o, s, dl, k in zip(out_sizes, stride, dilation, kernel)]
        xp = padded(x, padding, extent, 0, _compute_dtype(x), "conv.input")
        cols = xp[(Ellipsis,) + tap_slices((0,) * d, stride, dilation, out_sizes)]
        cols = cols.reshape(n, groups, cg, -1)
    else:
        cols = _columns(x, kernel, stride, padding, dilation, out_sizes).reshape(n, groups, cg * taps, -1)
    wm = upcast(w).reshape(groups, og, cg * taps)
    if cols.dtype != wm.dtype:
        cols = cols.astype(wm.dtype)
    np.matmul(wm, cols, out=target.reshape(n, groups, og, -1))


def col2im_into(
    cols: np.ndarray,
    stride: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    target: np.ndarray,
) -> None:
    """Sum column blocks ``(N, C, *kernel, *in_sizes)`` back onto the image ``target`` (one strided add per tap)."""
    d = len(stride)
    kernel, in_sizes = cols.shape[2 : 2 + d], cols.shape[2 + d :]
    reach = [window.reach(i, k, s, dl) for i, s, dl, k in zip(in_sizes, stride, dilation, kernel)]
    full_sizes = [max(r, o + p) for r, o, p in zip(reach, target.shape[2:], padding)]
    direct = not any(padding) and list(target.shape[2:]) == full_sizes and target.flags.c_contiguous
    full = target if direct else np.empty(target.shape[:2] + tuple(full_sizes), target.dtype)
    full.fill(0)
    for tap in itertools.product(*(range(k) for k in kernel)):
        dst = full[(slice(None), slice(None)) + tap_slices(tap, stride, dilation, in_sizes)]
        np.add(dst, cols[(slice(None), slice(None)) + tap], out=dst, casting="unsafe")
    if not direct:
        crop = tuple(slice(p, p + o) for p, o in zip(padding, target.shape[2:]))
        np.copyto(target, full[(slice(None), slice(None), *crop)])


def _conv_transposed(
    x: np.ndarray,
    w: np.ndarray,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
    target: np.ndarray,
) -> None:
    n, c = x.shape[:2]
    cg, og = c // groups, w.shape[1]
    kernel, in_sizes = w.shape[2:], x.shape[2:]
    wt = upcast(w).reshape(groups, cg, og * math.prod(kernel)).transpose(0, 2, 1)
    xs = upcast(x).reshape(n, groups, cg, -1)
    if xs.dtype != wt.dtype:
        xs = xs.astype(wt.dtype)
    cols = np.matmul(wt, xs).reshape((n, groups * og, *kernel, *in_sizes))
    col2im_into(cols, stride, dilation, padding, target)


def _conv_out_sizes(
    x: np.ndarray,
    w: np.ndarray,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
) -> tuple[int, ...]:
    sizes, kernel = x.shape[2:], w.shape[2:]
    if transposed:
        spatial = [
            window.transposed_size(i, k, s, p, p, dl, op)
            for i, s, p, dl, k, op in zip(sizes, stride, padding, dilation, kernel, output_padding)
        ]
        return (x.shape[0], w.shape[1] * groups, *spatial)
    spatial = [
        window.output_size(i, k, s, p, p, dl) for i, k, s, p, dl in zip(sizes, kernel, stride, padding, dilation)
    ]
    return (x.shape[0], w.shape[0], *spatial)


@kernel("aten::convolution.out")
def convolution(
    input: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    out: np.ndarray,
) -> np.ndarray:
    """N-d (1/2/3 spatial dims) convolution or transposed convolution of a batched input."""
    d = weight.ndim - 2
    stride, padding, dilation = expand(stride, d), expand(padding, d), expand(dilation, d)
    output_padding = expand(output_padding or [0], d)
    if input.ndim != d + 2:
        raise InvalidArgumentError(
            f"convolution expects a batched {d + 2}-d input for a {weight.ndim}-d weight, got shape {input.shape}; "
            "add the batch dimension before the convolution"
        )
    shape = _conv_out_sizes(input, weight, stride, padding, dilation, transposed, output_padding, groups)
    out = resize(out, shape)
    target = compute_target(out, _compute_dtype(input))
    run = _conv_transposed if transposed else _conv_forward
    run(input, weight, stride, padding, dilation, groups, target)
    _add_bias(target, bias)
    return out if target is out else store(out, target)


@kernel("aten::_convolution.out")
def convolution_with_flags(
    input: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    benchmark: bool,
    deterministic: bool,
    cudnn_enabled: bool,
    allow_tf32: bool,
    out: np.ndarray,
) -> np.ndarray:
    """``convolution`` with backend-selection flags that have no meaning on this runtime."""
    return convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, out)


@kernel("aten::im2col.out")
def im2col(
    self: np.ndarray,
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
    out: np.ndarray,
) -> np.ndarray:
    """Unfold 2-d sliding blocks into columns: ``(N, C, H, W)`` -> ``(N, C*kh*kw, L)`` (batch dim optional)."""
    x = self if self.ndim == 4 else self[None]
    kernel, dilation, padding, stride = (expand(v, 2) for v in (kernel_size, dilation, padding, stride))
    sizes = [
        window.output_size(i, k, s, p, p, dl) for i, k, s, p, dl in zip(x.shape[2:], kernel, stride, padding, dilation)
    ]
    cols = _columns(x, kernel, stride, padding, dilation, sizes)
    shape = (x.shape[1] * math.prod(kernel), math.prod(sizes))
    out = resize(out, shape if self.ndim == 3 else (x.shape[0], *shape))
    return store(out, cols.reshape(out.shape))


@kernel("aten::col2im.out")
def col2im(
    self: np.ndarray,
    output_size: list[int],
    kernel_size: list[int],
    dilation: list[int],
    padding: list[int],
    stride: list[int],
    out: np.ndarray,
) -> np.ndarray:
    """Fold columns ``(N, C*kh*kw, L)`` back into an image ``(N, C, *output_size)``, summing overlaps."""
    cols = self if self.ndim == 3 else self[None]
    size, kernel, dilation, padding, stride = (
        expand(v, 2) for v in (output_size, kernel_size, dilation, padding, stride)
    )
    blocks = [window.output_size(i, k, s, p, p, dl) for i, k, s, p, dl in zip(size, kernel, stride, padding, dilation)]
    n, c = cols.shape[0], cols.shape[1] // math.prod(kernel)
    out = resize(out, (n, c, *size) if self.ndim == 3 else (c, *size))
    out_b = out if self.ndim == 3 else out[None]
    target = compute_target(out_b, _compute_dtype(cols))
    col2im_into(upcast(cols).reshape(n, c, *kernel, *blocks), stride, dilation, padding, target)
    if target is not out_b:
        store(out_b, target)
    return out


def _shuffle(x: np.ndarray, r: int, upscale: bool, out: np.ndarray) -> np.ndarray:
    *lead, c, h, w = x.shape
    if upscale:
        blocks = x.reshape(*lead, c // (r * r), r, r, h, w)
        shape = (*lead, c // (r * r), h * r, w * r)
    else:
        blocks = x.reshape(*lead, c, h // r, r, w // r, r)
        shape = (*lead, c * r * r, h // r, w // r)
    k = len(lead)
    order = (*range(k), k, k + 3, k + 1, k + 4, k + 2) if upscale else (*range(k), k, k + 2, k + 4, k + 1, k + 3)
    out = resize(out, shape)
    np.copyto(out.reshape([blocks.shape[i] for i in order]), blocks.transpose(order), casting="unsafe")
    return out


@kernel("aten::pixel_shuffle.out")
def pixel_shuffle(self: np.ndarray, upscale_factor: int, out: np.ndarray) -> np.ndarray:
    """``(*, C*r*r, H, W)`` -> ``(*, C, H*r, W*r)``: channel blocks become spatial sub-pixels."""
    return _shuffle(self, upscale_factor, True, out)


@kernel("aten::pixel_unshuffle.out")
def pixel_unshuffle(self: np.ndarray, downscale_factor: int, out: np.ndarray) -> np.ndarray:
    """``(*, C, H*r, W*r)`` -> ``(*, C*r*r, H, W)``: the inverse of pixel_shuffle."""
    return _shuffle(self, downscale_factor, False, out)
