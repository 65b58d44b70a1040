"""Softmax and normalisation kernels: softmax/log-softmax, layer norm, group norm, batch norm (inference and
training). Torch-free: imports NumPy, the kernel registry and the reduction helpers.

Softmax and layer norm run in every transformer, so they work in place in the planned ``out`` buffer: a handful of
whole-tensor ufunc passes, no Python loop over rows. Half and bfloat16 are computed in float32 and cast once.
"""

from __future__ import annotations

import math

import numpy as np

from edgetorch.runtime.kernels import compiled
from edgetorch.runtime.kernels.reduction import (
    acc_dtype,
    extreme_last_axis,
    moments,
    row_sums,
    wrap_dim,
)
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize
from edgetorch.runtime.ops import activation

_F32 = np.dtype(np.float32)


def _workspace(out: np.ndarray, acc: np.dtype) -> np.ndarray:
    """``out`` itself when it can hold the computation in ``acc``, otherwise a scratch array to copy from."""
    return out if out.dtype == acc and out.flags.c_contiguous else np.empty(out.shape, acc)


def _finish(work: np.ndarray, out: np.ndarray) -> np.ndarray:
    if work is not out:
        np.copyto(out, work, casting="unsafe")
    return out


def _softmax(x: np.ndarray, dim: int, out: np.ndarray, log: bool) -> np.ndarray:
    out = resize(out, x.shape)
    if x.size == 0:
        return out
    axis = wrap_dim(dim, x.ndim)
    acc = acc_dtype(out.dtype)
    work = _workspace(out, acc)
    xs, ws = (x.reshape(1), work.reshape(1)) if x.ndim == 0 else (x, work)
    if xs.dtype != acc:
        np.copyto(ws, xs, casting="unsafe")
        xs = ws
    last = axis == xs.ndim - 1
    if last and not log:
        activation.softmax(xs, ws)()
        return _finish(work, out)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shift = extreme_last_axis(np.argmax, xs) if last else np.maximum.reduce(xs, axis=axis, keepdims=True)
        np.subtract(xs, shift, out=ws)
        if log:
            ws -= np.log(row_sums(np.exp(ws), axis))
        else:
            np.exp(ws, out=ws)
            ws *= np.reciprocal(row_sums(ws, axis))
    return _finish(work, out)


@kernel("aten::_softmax.out", "aten::softmax.int_out")
def softmax_out(x: np.ndarray, dim: int, half_to_float: bool | int | None, out: np.ndarray) -> np.ndarray:
    """exp(x) / sum(exp(x)) along ``dim``, shifted by the maximum so it cannot overflow.

    The third argument is ``half_to_float`` (``_softmax``) or ``dtype`` (``softmax.int``); both only choose the
    result dtype, which the planned ``out`` already has.
    """
    return _softmax(x, dim, out, log=False)


@kernel("aten::_log_softmax.out", "aten::log_softmax.int_out")
def log_softmax_out(x: np.ndarray, dim: int, half_to_float: bool | int | None, out: np.ndarray) -> np.ndarray:
    """x - log(sum(exp(x))) along ``dim``, computed without overflow (third argument as in :func:`softmax_out`)."""
    return _softmax(x, dim, out, log=True)


def _normalize_rows(x2: np.ndarray, eps: float, work: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Write (x2 - mean) * rstd of each row of the 2-d ``x2`` into ``work``; return the (rows, 1) mean and rstd."""
    inner = x2.shape[1]
    acc = work.dtype
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = row_sums(x2, 1) if x2.dtype == acc else np.add.reduce(x2, axis=1, dtype=acc, keepdims=True)
        mean /= inner
        np.subtract(x2, mean, out=work, casting="unsafe")
        var = np.einsum("ij,ij->i", work, work)[:, None]
        var /= inner
        rstd = np.reciprocal(np.sqrt(var + acc.type(eps)))
    work *= rstd
    return mean, rstd


def _write_stats(stats: list[tuple[np.ndarray, np.ndarray]], shape: tuple[int, ...]) -> list[np.ndarray]:
    written = []
    for value, out in stats:
        out = resize(out, shape)
        np.copyto(out, value.reshape(shape), casting="unsafe")
        written.append(out)
    return written


@kernel("aten::native_layer_norm.out")
def layer_norm_out(
    x: np.ndarray,
    normalized_shape: list[int],
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    eps: float,
    out: np.ndarray,
    mean_out: np.ndarray,
    rstd_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalise over the trailing ``normalized_shape`` dims, then scale and shift; also returns the mean and
    1/sqrt(var + eps) with the normalised dims kept as size 1 (torch's shapes)."""
    axis = x.ndim - len(normalized_shape)
    rows, inner = math.prod(x.shape[:axis]), math.prod(normalized_shape)
    out = resize(out, x.shape)
    stat_shape = x.shape[:axis] + (1,) * len(normalized_shape)
    fused = compiled.kernel("layer_norm") if inner and compiled.flat_float32(x, out, weight, bias) else None
    if fused is not None:  # one pass a row (compiled.py) instead of NumPy's several
        mean, rstd = np.empty(rows, _F32), np.empty(rows, _F32)
        none = np.empty(0, _F32)
        fused(x.reshape(rows, inner), none if weight is None else weight.reshape(-1),
              none if bias is None else bias.reshape(-1), _F32.type(eps), out.reshape(rows, inner), mean, rstd)  # fmt: skip
        mean_out, rstd_out = _write_stats([(mean, mean_out), (rstd, rstd_out)], stat_shape)
        return out, mean_out, rstd_out
    work = _workspace(out, acc_dtype(out.dtype))
    w2 = work.reshape(rows, inner)
    mean, rstd = _normalize_rows(x.reshape(rows, inner), eps, w2)
    if weight is not None:
        w2 *= weight.reshape(-1)
    if bias is not None:
        w2 += bias.reshape(-1)
    out = _finish(work, out)
    mean_out, rstd_out = _write_stats([(mean, mean_out), (rstd, rstd_out)], stat_shape)
    return out, mean_out, rstd_out


@kernel("aten::native_group_norm.out")
def group_norm_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    n: int,
    c: int,
    hxw: int,
    group: int,
    eps: float,
    out: np.ndarray,
    mean_out: np.ndarray,
    rstd_out: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Normalise each of ``group`` channel groups of every sample, then scale and shift per channel; also returns
    the (N, group) mean and 1/sqrt(var + eps)."""
    out = resize(out, x.shape)
    work = _workspace(out, acc_dtype(out.dtype))
    mean, rstd = _normalize_rows(x.reshape(n * group, -1 if x.size else 0), eps, work.reshape(n * group, -1))
    per_channel = work.reshape(n, c, hxw)
    if weight is not None:
        per_channel *= weight.reshape(c, 1)
    if bias is not None:
        per_channel += bias.reshape(c, 1)
    out = _finish(work, out)
    mean_out, rstd_out = _write_stats([(mean, mean_out), (rstd, rstd_out)], (n, group))
    return out, mean_out, rstd_out


def _channels(x: np.ndarray) -> np.ndarray:
    """``x`` (N, C, *spatial) viewed as (N, C, S)."""
    return x.reshape(x.shape[0], x.shape[1] if x.ndim > 1 else 1, math.prod(x.shape[2:]))


def _batch_norm_apply(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    mean: np.ndarray,
    invstd: np.ndarray,
    out: np.ndarray,
) -> np.ndarray:
    """out = (x - mean) * invstd * weight + bias with per-channel (C,) statistics, folded into one scale/shift."""
    out = resize(out, x.shape)
    scale, shift = _scale_shift(weight, bias, mean, invstd)
    work = _workspace(out, scale.dtype)
    w3 = _channels(work)
    np.multiply(_channels(x), scale[:, None], out=w3, casting="unsafe")
    w3 += shift[:, None]
    return _finish(work, out)


def _empty_stats(*outs: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(resize(o, (0,)) for o in outs)


def _scale_shift(
    weight: np.ndarray | None, bias: np.ndarray | None, mean: np.ndarray, invstd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    scale = invstd if weight is None else invstd * weight
    return scale, (-mean * scale if bias is None else bias - mean * scale)


def _eval_stats(running_mean: np.ndarray, running_var: np.ndarray, eps: float, dtype: np.dtype) -> tuple:
    acc = acc_dtype(dtype)
    return running_mean.astype(acc, copy=False), np.reciprocal(np.sqrt(running_var.astype(acc) + acc.type(eps)))


def batch_norm_scale_shift(
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    eps: float,
    dtype: np.dtype,
) -> tuple[np.ndarray, np.ndarray]:
    """The per-channel scale and shift inference batch norm applies to an input of ``dtype`` (out = x * scale +
    shift), computed as the kernel computes them: for a load-time fusion whose results must match it bit for
    bit (edgetorch/runtime/static_fusion.py)."""
    return _scale_shift(weight, bias, *_eval_stats(running_mean, running_var, eps, dtype))


def _eval_batch_norm(x, weight, bias, running_mean, running_var, eps, out, save_mean, save_invstd):
    mean, invstd = _eval_stats(running_mean, running_var, eps, out.dtype)
    return (_batch_norm_apply(x, weight, bias, mean, invstd, out), *_empty_stats(save_mean, save_invstd))


def _train_batch_norm(x, weight, bias, running_mean, running_var, momentum, eps, out, save_mean, save_invstd):
    """Batch statistics over every dim but the channels; the running statistics (when given) move towards them by
    ``momentum``, the variance unbiased, as torch does."""
    acc = acc_dtype(out.dtype)
    mean, var, _ = moments(x, [d for d in range(x.ndim) if d != 1], 0, acc)
    mean, var = mean.reshape(-1), var.reshape(-1)
    invstd = np.reciprocal(np.sqrt(var + acc.type(eps)))
    if running_mean is not None:
        running_mean *= 1 - momentum
        running_mean += (momentum * mean).astype(running_mean.dtype)
    if running_var is not None:
        count = x.size // max(x.shape[1], 1)
        running_var *= 1 - momentum
        running_var += (momentum * var * (count / max(count - 1, 1))).astype(running_var.dtype)
    result = _batch_norm_apply(x, weight, bias, mean, invstd, out)
    return (result, *_write_stats([(mean, save_mean), (invstd, save_invstd)], mean.shape))


@kernel("aten::_native_batch_norm_legit_no_training.out")
def batch_norm_no_training_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    running_mean: np.ndarray,
    running_var: np.ndarray,
    momentum: float,
    eps: float,
    out: np.ndarray,
    save_mean: np.ndarray,
    save_invstd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inference batch norm with the running statistics; the two saved-statistics outs come back empty, as in
    torch."""
    return _eval_batch_norm(x, weight, bias, running_mean, running_var, eps, out, save_mean, save_invstd)


@kernel("aten::_native_batch_norm_legit.out", "aten::native_batch_norm.out")
def batch_norm_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    training: bool,
    momentum: float,
    eps: float,
    out: np.ndarray,
    save_mean: np.ndarray,
    save_invstd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch norm: in training, with batch statistics (returned as mean and invstd) and the running statistics
    updated in place; otherwise with the running statistics and empty saved statistics."""
    if training:
        return _train_batch_norm(x, weight, bias, running_mean, running_var, momentum, eps, out, save_mean, save_invstd)
    return _eval_batch_norm(x, weight, bias, running_mean, running_var, eps, out, save_mean, save_invstd)


@kernel("aten::_native_batch_norm_legit.no_stats_out")
def batch_norm_no_stats_out(
    x: np.ndarray,
    weight: np.ndarray | None,
    bias: np.ndarray | None,
    training: bool,
    momentum: float,
    eps: float,
    out: np.ndarray,
    save_mean: np.ndarray,
    save_invstd: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batch norm with batch statistics and no running statistics to update (``training`` has nothing to select
    without running statistics)."""
    return _train_batch_norm(x, weight, bias, None, None, momentum, eps, out, save_mean, save_invstd)
