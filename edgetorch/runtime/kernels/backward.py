"""Gradient kernels of Core ATen (convolution, pooling, embedding, layer/group norm), for on-device training.

Each is the adjoint of its forward kernel, written as whole-array NumPy: convolution gradients are im2col
columns times one batched ``np.matmul`` (and col2im for the input gradient of a plain convolution); pooling
gradients scatter ``grad_output`` back through the windows (``np.bincount`` for max pooling, one strided add
per tap for average pooling, two small matrices for adaptive pooling). Ops with an ``output_mask`` leave the
outs it switches off untouched. Imports only NumPy and the runtime's own modules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from edgetorch.errors import InvalidArgumentError, OutOfRangeError
from edgetorch.runtime.kernels.conv import col2im_into, expand, window_view
from edgetorch.runtime.kernels.linalg import store, upcast
from edgetorch.runtime.kernels.pool import adaptive_bounds
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize
from edgetorch.runtime.ops import window


def _columns(
    x: np.ndarray,
    groups: int,
    kernel_size: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    out_sizes: Sequence[int],
) -> np.ndarray:
    """Windows of zero-padded ``x`` ``(N, C, *in)`` as ``(groups, C/groups * prod(kernel), N * prod(out_sizes))``."""
    n, c, d = x.shape[0], x.shape[1], len(kernel_size)
    reach = [window.reach(o, k, s, dl) for o, s, dl, k in zip(out_sizes, stride, dilation, kernel_size)]
    extent = [max(r, i + p) for r, i, p in zip(reach, x.shape[2:], padding)]
    xp = np.zeros((n, c, *extent), x.dtype)
    xp[(slice(None), slice(None), *(slice(p, p + i) for p, i in zip(padding, x.shape[2:])))] = x
    windows = window_view(xp, kernel_size, stride, dilation, out_sizes)  # (N, C, *out, *kernel)
    order = (1, *range(2 + d, 2 + 2 * d), 0, *range(2, 2 + d))  # -> (C, *kernel, N, *out)
    return np.ascontiguousarray(windows.transpose(order)).reshape(groups, -1, n * math.prod(out_sizes))


def _grouped(t: np.ndarray, groups: int) -> np.ndarray:
    """``t`` ``(N, C, *sizes)`` as ``(groups, C/groups, N * prod(sizes))``."""
    return np.moveaxis(t, 1, 0).reshape(groups, t.shape[1] // groups, -1)


def _ungrouped(m: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`_grouped`: ``(groups, C/groups, N * prod(sizes))`` -> ``(N, C, *sizes)``."""
    return np.moveaxis(m.reshape(shape[1], shape[0], *shape[2:]), 0, 1)


def _conv_grads(gy, x, w, stride, padding, dilation, groups, mask) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Input and weight gradients of ``y = conv(x, w)``; ``y``'s gradient ``gy`` is ``(N, O, *out)``."""
    d, g = w.ndim - 2, groups
    kernel_size, out_sizes = w.shape[2:], gy.shape[2:]
    gym = _grouped(gy, g)  # (g, og, N*out)
    gx = gw = None
    if mask[0]:
        wt = w.reshape(g, w.shape[0] // g, -1).transpose(0, 2, 1)  # (g, cg*K, og)
        cols = np.matmul(wt, gym).reshape(x.shape[1], *kernel_size, x.shape[0], *out_sizes)
        cols = np.moveaxis(cols, 1 + d, 0)  # (N, C, *kernel, *out)
        gx = np.empty(x.shape, gy.dtype)
        col2im_into(cols, stride, dilation, padding, gx)
    if mask[1]:
        cols = _columns(x, g, kernel_size, stride, padding, dilation, out_sizes)
        gw = np.matmul(gym, cols.transpose(0, 2, 1)).reshape(w.shape)
    return gx, gw


def _conv_transposed_grads(gy, x, w, stride, padding, dilation, groups, mask):
    """Input and weight gradients of ``y = conv_transpose(x, w)``: both read the windows of ``gy``."""
    g, in_sizes = groups, x.shape[2:]
    cols = _columns(gy, g, w.shape[2:], stride, padding, dilation, in_sizes)  # (g, og*K, N*in)
    gx = gw = None
    if mask[0]:
        gx = _ungrouped(np.matmul(w.reshape(g, w.shape[0] // g, -1), cols), x.shape)
    if mask[1]:
        gw = np.matmul(_grouped(x, g), cols.transpose(0, 2, 1)).reshape(w.shape)
    return gx, gw


def _compute(*arrays: np.ndarray) -> list[np.ndarray]:
    """``arrays`` in one compute dtype: float64 if any is float64, else float32."""
    dtype = np.result_type(*(upcast(a).dtype for a in arrays), np.float32)
    return [a.astype(dtype, copy=False) for a in arrays]


def _write(out: np.ndarray, value: np.ndarray | None) -> np.ndarray:
    """``out`` resized to ``value``'s shape and holding it; ``out`` untouched when the gradient was not asked for."""
    if value is None:
        return out
    return store(resize(out, value.shape), value)


@kernel("aten::convolution_backward.out")
def convolution_backward(
    grad_output: np.ndarray,
    input: np.ndarray,
    weight: np.ndarray,
    bias_sizes: list[int] | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    transposed: bool,
    output_padding: list[int],
    groups: int,
    output_mask: list[bool],
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of ``convolution`` (plain or transposed, 1-3 spatial dims) for its input, weight and bias."""
    d = weight.ndim - 2
    if input.ndim != d + 2 or grad_output.ndim != d + 2:
        raise InvalidArgumentError(
            f"convolution_backward expects batched {d + 2}-d input and grad_output for a {weight.ndim}-d weight, "
            f"got {input.shape} and {grad_output.shape}; add the batch dimension"
        )
    stride, padding, dilation = expand(stride, d), expand(padding, d), expand(dilation, d)
    gy, x, w = _compute(grad_output, input, weight)
    grads = _conv_transposed_grads if transposed else _conv_grads
    gx, gw = grads(gy, x, w, stride, padding, dilation, groups, output_mask)
    gb = gy.sum(axis=(0, *range(2, gy.ndim))) if output_mask[2] else None
    return _write(out0, gx), _write(out1, gw), _write(out2, gb)


@kernel("aten::max_pool2d_with_indices_backward.grad_input")
def max_pool2d_with_indices_backward(
    grad_output: np.ndarray,
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
    indices: np.ndarray,
    grad_input: np.ndarray,
) -> np.ndarray:
    """Gradient of 2-d max pooling: each output's gradient added at the input position its index names."""
    planes, area = math.prod(self.shape[:-2]), self.shape[-2] * self.shape[-1]
    idx = indices.reshape(planes, -1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= area):
        raise OutOfRangeError(
            f"max_pool2d_with_indices_backward: indices must lie in [0, {area}) (one {self.shape[-2:]} plane), "
            f"found [{idx.min()}, {idx.max()}]; pass the indices max_pool2d_with_indices returned"
        )
    flat = (idx + np.arange(planes)[:, None] * area).ravel()
    sums = np.bincount(flat, weights=grad_output.reshape(-1).astype(np.float64), minlength=planes * area)
    return store(resize(grad_input, self.shape), sums.reshape(self.shape))


@kernel("aten::avg_pool2d_backward.grad_input")
def avg_pool2d_backward(
    grad_output: np.ndarray,
    self: np.ndarray,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    grad_input: np.ndarray,
) -> np.ndarray:
    """Gradient of 2-d average pooling: each output's gradient over its divisor, spread over its window."""
    kernel_size = expand(kernel_size, 2)
    stride, padding = expand(stride or kernel_size, 2), expand(padding, 2)
    sizes = self.shape[-2:]
    out_sizes = [
        window.output_size(n, k, s, p, p, 1, ceil_mode) for n, k, s, p in zip(sizes, kernel_size, stride, padding)
    ]
    gy = upcast(grad_output).reshape(-1, 1, *out_sizes)
    if divisor_override:
        scaled = gy / divisor_override
    else:
        rows, cols = (
            window.window_counts(n, k, s, p, p, m, 1, count_include_pad)
            for n, k, s, p, m in zip(sizes, kernel_size, stride, padding, out_sizes)
        )
        scaled = gy / np.outer(rows, cols).astype(gy.dtype)
    taps = np.broadcast_to(scaled[:, :, None, None], (*scaled.shape[:2], *kernel_size, *out_sizes))
    gx = np.empty((scaled.shape[0], 1, *sizes), scaled.dtype)
    col2im_into(taps, stride, [1, 1], padding, gx)
    return store(resize(grad_input, self.shape), gx.reshape(self.shape))


def _adaptive_matrix(n: int, m: int, dtype: np.dtype) -> np.ndarray:
    """``(m, n)`` matrix whose row ``o`` averages torch's adaptive window ``[floor(o*n/m), ceil((o+1)*n/m))``."""
    start, end = (b[:, None] for b in adaptive_bounds(n, m))
    i = np.arange(n)[None, :]
    inside = (i >= start) & (i < end)
    return (inside / (end - start)).astype(dtype)


@kernel("aten::_adaptive_avg_pool2d_backward.out")
def adaptive_avg_pool2d_backward(grad_output: np.ndarray, self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """Gradient of 2-d adaptive average pooling (``rows.T @ grad_output @ cols`` per plane)."""
    gy = upcast(grad_output)
    (h, w), (oh, ow) = self.shape[-2:], gy.shape[-2:]
    rows, cols = _adaptive_matrix(h, oh, gy.dtype), _adaptive_matrix(w, ow, gy.dtype)
    return store(resize(out, self.shape), rows.T @ gy @ cols)


@kernel("aten::embedding_dense_backward.out")
def embedding_dense_backward(
    grad_output: np.ndarray,
    indices: np.ndarray,
    num_weights: int,
    padding_idx: int,
    scale_grad_by_freq: bool,
    out: np.ndarray,
) -> np.ndarray:
    """Gradient of ``embedding`` for its weight: rows of ``grad_output`` summed into the rows their indices name."""
    idx = indices.reshape(-1).astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= num_weights):
        raise OutOfRangeError(
            f"embedding_dense_backward: indices must lie in [0, {num_weights}), found [{idx.min()}, {idx.max()}]"
        )
    grad = upcast(grad_output).reshape(idx.size, -1)
    if scale_grad_by_freq:
        grad = grad / np.bincount(idx, minlength=num_weights)[idx, None].astype(grad.dtype)
    keep = idx != padding_idx
    gw = np.zeros((num_weights, grad.shape[1]), grad.dtype)
    np.add.at(gw, idx[keep], grad[keep])
    return store(resize(out, gw.shape), gw)


def _norm_grads(gy, x, mean, rstd, weight, reduce_axes, mask) -> tuple[np.ndarray | None, np.ndarray]:
    """Input gradient of ``(x - mean) * rstd * weight`` normalised over ``reduce_axes``, and ``x``'s normal form."""
    xhat = (x - mean) * rstd
    if not mask[0]:
        return None, xhat
    g = gy if weight is None else gy * weight
    mean_g = g.mean(axis=reduce_axes, keepdims=True)
    mean_gx = (g * xhat).mean(axis=reduce_axes, keepdims=True)
    return rstd * (g - mean_g - xhat * mean_gx), xhat


@kernel("aten::native_layer_norm_backward.out")
def native_layer_norm_backward(
    grad_out: np.ndarray,
    input: np.ndarray,
    normalized_shape: list[int],
    mean: np.ndarray,
    rstd: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    output_mask: list[bool],
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of ``native_layer_norm`` for its input, weight and bias."""
    k = len(normalized_shape)
    lead = input.shape[: input.ndim - k]
    gy, x, mean, rstd = _compute(grad_out, input, mean, rstd)
    mean, rstd = mean.reshape(*lead, *(1,) * k), rstd.reshape(*lead, *(1,) * k)
    w = None if weight is None else weight.astype(gy.dtype)
    inner = tuple(range(len(lead), input.ndim))
    gx, xhat = _norm_grads(gy, x, mean, rstd, w, inner, output_mask)
    outer = tuple(range(len(lead)))
    gw = (gy * xhat).sum(axis=outer) if output_mask[1] else None
    gb = gy.sum(axis=outer) if output_mask[2] else None
    return _write(out0, gx), _write(out1, gw), _write(out2, gb)


@kernel("aten::native_group_norm_backward.out")
def native_group_norm_backward(
    grad_out: np.ndarray,
    input: np.ndarray,
    mean: np.ndarray,
    rstd: np.ndarray,
    weight: np.ndarray | None,
    N: int,
    C: int,
    HxW: int,
    group: int,
    output_mask: list[bool],
    out0: np.ndarray,
    out1: np.ndarray,
    out2: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of ``native_group_norm`` for its input, weight and bias."""
    shape = (N, group, C // group, HxW)
    gy, x, mean, rstd = _compute(grad_out, input, mean, rstd)
    gy, x = gy.reshape(shape), x.reshape(shape)
    mean, rstd = mean.reshape(N, group, 1, 1), rstd.reshape(N, group, 1, 1)
    w = None if weight is None else weight.astype(gy.dtype).reshape(1, group, C // group, 1)
    gx, xhat = _norm_grads(gy, x, mean, rstd, w, (2, 3), output_mask)
    gw = (gy * xhat).sum(axis=(0, 3)).reshape(C) if output_mask[1] else None
    gb = gy.sum(axis=(0, 3)).reshape(C) if output_mask[2] else None
    return _write(out0, None if gx is None else gx.reshape(input.shape)), _write(out1, gw), _write(out2, gb)
