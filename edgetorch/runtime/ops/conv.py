"""Convolution as ops: depthwise convolution declared once, its layout (NCHW for the portable kernels, NHWC for
the XNNPACK delegate) a parameter, with the bias and clamp epilogue it absorbs; and the window views (padded
input, sliding windows, tap-major im2col) the convolution and pooling kernels share.

:func:`depthwise` returns the steps that compute ``y``. Each tier keeps the fastest formulation measured for
each layout (docs/benchmarks.md, "Depthwise convolution in the op layer"):

- compiled tier, float32, channel multiplier 1: one pass per output, the taps summed in the window's row order
  and then the bias, no fused multiply-add (NHWC: kernels/depthwise.py, any window; NCHW: the 3x3 kernel of
  kernels/compiled.py, stride 1 or 2). Both layouts therefore give the same bits on this tier.
- NumPy tier, NHWC: one multiply and one add per tap over the whole output, each tap a view with contiguous
  rows (stride-phase planes, :meth:`Window.tap_views`), in the same order as the compiled tier: the same bits.
- NumPy tier, NCHW: per channel a (multiplier x taps) @ (taps x positions) product over a cache-sized block of
  channels' im2col columns, one batched matmul a block. BLAS orders each sum its own way, so this formulation
  agrees with the others within float32 rounding, not bit for bit; summing tap by tap in NCHW was slower.

Imports NumPy, the policy and the runtime's kernels; never torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import as_strided

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import policy
from edgetorch.runtime.dtypes import upcast
from edgetorch.runtime.kernels import compiled, windows
from edgetorch.runtime.kernels import depthwise as depthwise_kernels
from edgetorch.runtime.kernels.scratch import scratch
from edgetorch.runtime.ops import window
from edgetorch.runtime.ops.epilogue import NO_CLAMP

Step = Callable[[], object]

# Depthwise columns are built and multiplied in channel blocks of about this many bytes, so that a block is still
# in cache when the matmul reads it (the block size measured best on MobileNetV2's layers: docs/benchmarks.md).
_BLOCK_BYTES = 1 << 19


def padded(
    x: np.ndarray,
    lo: Sequence[int],
    extent: Sequence[int],
    value: float,
    dtype: np.dtype,
    purpose: str | None = None,
) -> np.ndarray:
    """``x`` with its last ``len(lo)`` dims shifted by ``lo`` inside a ``value``-filled box of size ``extent``.

    Returns ``x`` itself (no copy) when nothing needs padding and the dtype already matches. With ``purpose`` the
    box is a scratch array reused by every call with the same shapes (only its inside is rewritten), so the
    result is only valid until the caller returns.
    """
    d = len(lo)
    sizes = x.shape[-d:]
    if dtype == x.dtype and not any(lo) and all(e <= s for e, s in zip(extent, sizes)):
        return x
    shape = x.shape[:-d] + tuple(extent)
    if purpose is None:
        buf = np.full(shape, value, dtype)
    else:
        buf = scratch((purpose, tuple(lo), x.shape), shape, dtype, fill=value)
    dst = tuple(slice(p, min(p + s, e)) for p, s, e in zip(lo, sizes, extent))
    src = tuple(slice(0, r.stop - r.start) for r in dst)
    np.copyto(buf[(Ellipsis,) + dst], x[(Ellipsis,) + src], casting="unsafe")
    return buf


def window_view(
    x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], out_sizes: Sequence[int]
) -> np.ndarray:
    """Read-only view ``(*lead, *out_sizes, *kernel)`` of ``x``'s sliding windows over its last ``len(kernel)`` dims."""
    d = len(kernel)
    spatial = x.strides[-d:]
    shape = x.shape[:-d] + tuple(out_sizes) + tuple(kernel)
    strides = (
        x.strides[:-d] + tuple(s * t for s, t in zip(spatial, stride)) + tuple(s * t for s, t in zip(spatial, dilation))
    )
    return as_strided(x, shape, strides, writeable=False)


def tap_major(
    xp: np.ndarray, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int], out_sizes: Sequence[int]
) -> np.ndarray:
    """Read-only view ``(N, C, *kernel, *out_sizes)`` of the padded NCHW ``xp``: what each kernel tap reads at
    every output position (im2col's columns before they are copied)."""
    d = len(kernel)
    win = window_view(xp, kernel, stride, dilation, out_sizes)
    return win.transpose((0, 1, *range(2 + d, 2 + 2 * d), *range(2, 2 + d)))


def im2col(
    x: np.ndarray,
    cols: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    layout: str = "NCHW",
) -> list[Step]:
    """The steps copying every window of ``x``, zero-padded by ``padding`` (before and after each spatial
    axis), into ``cols``: convolution's columns. NCHW: ``cols`` is ``(N, C, *kernel, *out_sizes)`` (tap-major,
    what the weight multiplies), any number of spatial dims. NHWC: ``cols`` is ``(N, OH, OW, KH, KW, *channels)``
    with the channels split as the caller likes (a view of an [N * OH * OW, KH * KW * C] buffer, or of one
    per group); on the compiled tier one pass reads the padding in place when ``cols`` is C-contiguous float32.
    The steps read ``x`` when run."""
    window.check_layout(layout, "im2col")
    d = len(kernel)
    if layout == "NCHW":
        if cols.shape[:2] != x.shape[:2] or cols.shape[2 : 2 + d] != tuple(kernel) or x.ndim != d + 2:
            raise InvalidArgumentError(
                f"NCHW im2col of an input of shape {x.shape} with a {tuple(kernel)} window expects columns of shape "
                f"(N, C, *kernel, *out_sizes), found {cols.shape}"
            )
        lo = [p[0] for p in padding]
        return [partial(_nchw_columns, x, cols, list(kernel), list(stride), lo, list(dilation))]
    (kh, kw), (sh, sw), (dh, dw), ((top, bottom), (left, right)) = kernel, stride, dilation, padding
    win = window.Window(kh, kw, sh, sw, dh, dw, top, right, bottom, left)
    nb, h, wd, c = x.shape
    oh, ow = win.out_hw(h, wd)
    if cols.shape[:5] != (nb, oh, ow, kh, kw) or math.prod(cols.shape[5:]) != c:
        raise InvalidArgumentError(
            f"NHWC im2col of an input of shape {x.shape} expects columns of shape {(nb, oh, ow, kh, kw, c)} (the "
            f"channels may be split), found {cols.shape}"
        )
    if policy.compiled_tier() and compiled.flat_float32(x, cols):
        step = windows.im2col_step(x, cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left)
        if step is not None:
            return [step]
    xp, steps = win.pad(x, 0.0)
    nchw = window_view(xp.transpose(0, 3, 1, 2), (kh, kw), (sh, sw), (dh, dw), (oh, ow))
    view = nchw.transpose(0, 2, 3, 4, 5, 1).reshape(cols.shape)  # channels last again; a view
    return [*steps, partial(np.copyto, cols, view)]


def _nchw_columns(
    x: np.ndarray, cols: np.ndarray, kernel: list[int], stride: list[int], lo: list[int], dilation: list[int]
) -> None:
    out_sizes = cols.shape[2 + len(kernel) :]
    extent = [window.reach(o, k, s, dl) for o, s, dl, k in zip(out_sizes, stride, dilation, kernel)]
    xp = padded(x, lo, extent, 0, cols.dtype, "conv.input")
    np.copyto(cols, tap_major(xp, kernel, stride, dilation, out_sizes), casting="unsafe")


def depthwise(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    y: np.ndarray,
    stride: Sequence[int],
    padding: Sequence[tuple[int, int]],
    dilation: Sequence[int],
    layout: str = "NCHW",
    clamp: tuple[float, float] = NO_CLAMP,
    where: str = "",
) -> list[Step]:
    """The steps computing ``y = clamp(depthwise_conv(x, w) + bias)``: one input channel per group, ``w`` in
    torch's layout ``[C * multiplier, 1, *kernel]`` (output channel ``c * multiplier + m`` reads input channel
    ``c``), ``padding`` the amounts before and after each spatial axis, ``y`` allocated at the output shape in
    the compute dtype. NCHW takes any number of spatial dims, NHWC two. The steps read ``x`` when run. ``where``
    names the layer in the kernel choices ``edgetorch inspect --kernels`` prints."""
    window.check_layout(layout, "depthwise convolution")
    d = w.ndim - 2
    channels = x.shape[1] if layout == "NCHW" else x.shape[-1]
    if w.shape[1] != 1 or w.shape[0] % max(channels, 1) or x.ndim != d + 2:
        raise InvalidArgumentError(
            f"depthwise convolution expects a [C * multiplier, 1, *kernel] weight for the {layout} input of shape "
            f"{x.shape}, found weight shape {w.shape}; pass a weight with one input channel per group"
        )
    if layout == "NHWC":
        if d != 2:
            raise InvalidArgumentError(f"NHWC depthwise convolution is 2-d, found a {d}-d kernel {w.shape[2:]}")
        (top, bottom), (left, right) = padding
        (kh, kw), (sh, sw), (dh, dw) = w.shape[2:], stride, dilation
        win = window.Window(kh, kw, sh, sw, dh, dw, top, right, bottom, left)
        return _nhwc(x, w, bias, y, win, clamp, where)
    return [partial(_nchw, x, w, bias, y, list(stride), [p[0] for p in padding], list(dilation), clamp)]


def _epilogue(y: np.ndarray, bias: np.ndarray | None, axis: int, clamp: tuple[float, float]) -> None:
    """``y = clamp(y + bias)`` in place, the bias along ``axis``: the float add then compare of every tier."""
    if bias is not None:
        shape = [1] * y.ndim
        shape[axis] = -1
        np.add(y, upcast(bias).reshape(shape), out=y, casting="unsafe")
    if clamp != NO_CLAMP:
        np.clip(y, y.dtype.type(clamp[0]), y.dtype.type(clamp[1]), out=y)


def _nchw(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    y: np.ndarray,
    stride: list[int],
    lo: list[int],
    dilation: list[int],
    clamp: tuple[float, float],
) -> None:
    kernel, out_sizes = w.shape[2:], y.shape[2:]
    extent = [window.reach(o, k, s, dl) for o, s, dl, k in zip(out_sizes, stride, dilation, kernel)]
    xp = padded(x, lo, extent, 0, y.dtype, "conv.input")
    if not _nchw_3x3(xp, w, stride, dilation, y):
        _nchw_blocked(xp, w, stride, dilation, y)
    _epilogue(y, bias, 1, clamp)


def _nchw_3x3(xp: np.ndarray, w: np.ndarray, stride: list[int], dilation: list[int], y: np.ndarray) -> bool:
    """The compiled tier's 3x3 NCHW kernel on the padded input, when it applies (float32, the same stride 1 or
    2 on both axes, no dilation, multiplier 1); False otherwise."""
    n, c = xp.shape[:2]
    if w.shape[1:] != (1, 3, 3) or w.shape[0] != c or list(dilation) != [1, 1] or stride[0] != stride[1]:
        return False
    if stride[0] not in (1, 2) or not compiled.flat_float32(xp, w, y):
        return False
    fused = compiled.kernel("depthwise3x3")
    if fused is None:
        return False
    tmp = scratch("conv.depthwise3x3", (xp.shape[2] * (xp.shape[3] + 1),), np.dtype(np.float32))
    fused(xp, w.reshape(c, 3, 3), stride[0], y, tmp, 0, n * c)
    return True


def _nchw_blocked(xp: np.ndarray, w: np.ndarray, stride: list[int], dilation: list[int], y: np.ndarray) -> None:
    """Per channel a (multiplier x taps) @ (taps x positions) product over its im2col columns, a block of
    channels copied into columns and multiplied at a time."""
    n, c = xp.shape[:2]
    kernel, out_sizes = w.shape[2:], y.shape[2:]
    taps, positions = math.prod(kernel), math.prod(out_sizes)
    taps_view = tap_major(xp, kernel, stride, dilation, out_sizes)
    wm = upcast(w).reshape(c, -1, taps)
    if wm.dtype != y.dtype:
        wm = wm.astype(y.dtype)
    result = y.reshape(n, c, wm.shape[1], positions)
    block = max(1, _BLOCK_BYTES // max(1, n * taps * positions * y.itemsize))
    for start in range(0, c, block):
        stop = min(c, start + block)
        cols = scratch("conv.depthwise", (n, stop - start, *kernel, *out_sizes), y.dtype)
        np.copyto(cols, taps_view[:, start:stop], casting="unsafe")
        np.matmul(wm[start:stop], cols.reshape(n, stop - start, taps, positions), out=result[:, start:stop])


def _nhwc(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    y: np.ndarray,
    win: window.Window,
    clamp: tuple[float, float],
    where: str,
) -> list[Step]:
    nb, h, wd, c = x.shape
    oh, ow = win.out_hw(h, wd)
    mult = w.shape[0] // c
    if y.shape != (nb, oh, ow, c * mult):
        raise InvalidArgumentError(
            f"depthwise convolution output must have shape {(nb, oh, ow, c * mult)}, found {y.shape}"
        )
    # [C * mult, 1, KH, KW] -> one [C, mult] weight per tap, in the window's row order
    taps = np.ascontiguousarray(w.reshape(c, mult, win.kh * win.kw).transpose(2, 0, 1), dtype=y.dtype)
    if mult == 1 and x.dtype == y.dtype == np.float32 and policy.compiled_tier():
        first = np.ascontiguousarray(taps[:, :, 0])
        b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias.reshape(-1), np.float32)
        geometry = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)
        bounds = np.float32(clamp[0]), np.float32(clamp[1])
        step = depthwise_kernels.nhwc_step(x, first, b, y, *geometry, *bounds, where=where)
        if step is not None:
            return [step]
    views, steps = win.tap_views(x, 0.0)
    acc = y if mult == 1 else y.reshape(nb, oh, ow, c, mult)
    tmp = np.empty_like(acc)
    for t, view in enumerate(views):
        if mult == 1:  # a weight row per output column lets NumPy run one long inner loop
            wt = np.ascontiguousarray(np.broadcast_to(taps[t, :, 0], (ow, c)))
        else:
            view, wt = view[..., None], taps[t]
        if t == 0:
            steps.append(partial(np.multiply, view, wt, out=acc))
        else:
            steps += [partial(np.multiply, view, wt, out=tmp), partial(np.add, acc, tmp, out=acc)]
    if bias is not None or clamp != NO_CLAMP:
        steps.append(partial(_epilogue, y, bias, 3, clamp))
    return steps
