"""Kernels for ExecuTorch's LLM custom ops (the ``llama`` namespace): attention over a KV cache, cache writes.

The layout is ExecuTorch's: queries, keys, values and caches are ``[batch, seq, heads, head_dim]``, the
sequence at dim 1. Key/value heads may be fewer than query heads (grouped-query attention): query head
``h`` reads key/value head ``h // (heads_q // heads_kv)``. Without a mask, a query attends to the first
``start_pos + seq_len`` cache rows (causally when ``is_causal``: the query at ``start_pos + i`` sees rows
``0 .. start_pos + i``); with a 2-D additive mask ``[seq_len, n]`` it attends to the first ``n`` rows.
Torch-free.
"""

from __future__ import annotations

import math

import numpy as np

from edgetorch.errors import InvalidInputError, OutOfRangeError
from edgetorch.runtime.kernels import compiled
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize


def _attention(
    query: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    start_pos: int,
    attn_mask: np.ndarray | None,
    is_causal: bool,
    scale: float | None,
    out: np.ndarray,
) -> np.ndarray:
    batch, seq_len, heads, head_dim = query.shape
    kv_heads = keys.shape[2]
    if keys.ndim != 4 or heads % kv_heads:
        raise InvalidInputError(
            f"custom sdpa expects 4-D caches whose head count divides the query's {heads} heads; "
            f"found a key cache of shape {list(keys.shape)}"
        )
    n_keys = attn_mask.shape[-1] if attn_mask is not None else start_pos + seq_len
    if n_keys > keys.shape[1]:
        raise OutOfRangeError(
            f"attention over {n_keys} positions exceeds the cache length {keys.shape[1]}; "
            "keep start_pos + seq_len within the model's max context length"
        )
    group = heads // kv_heads
    decode = batch == 1 and seq_len == 1 and attn_mask is None and n_keys > 0
    if decode and compiled.flat_float32(query, keys, values):
        out = resize(out, query.shape)
        if out.dtype == np.float32 and out.flags.c_contiguous:  # a decode step (one query) into a flat out
            factor = np.float32(scale if scale is not None else 1.0 / math.sqrt(head_dim))
            fused = compiled.kernel_if_loaded("decode_attention")
            if fused is None:  # the general path below without its batch and sequence axes
                return _decode_attention(query, keys, values, n_keys, kv_heads, group, factor, out)
            scores = np.empty(group * n_keys, np.float32)  # one compiled pass (compiled.py), if numba is loaded
            fused(
                query.reshape(heads, head_dim), keys[0], values[0], n_keys, factor, out.reshape(heads, head_dim), scores
            )
            return out
    dtype = np.float32 if query.dtype != np.float64 else np.float64
    # [batch, kv_heads, group * seq_len, head_dim]: one matmul per key/value head serves its whole group.
    q = query.astype(dtype, copy=False).reshape(batch, seq_len, kv_heads, group, head_dim)
    q = q.transpose(0, 2, 3, 1, 4).reshape(batch, kv_heads, group * seq_len, head_dim)
    k = keys[:, :n_keys].astype(dtype, copy=False).transpose(0, 2, 3, 1)
    v = values[:, :n_keys].astype(dtype, copy=False).transpose(0, 2, 1, 3)
    scores = np.matmul(q, k)
    scores *= scale if scale is not None else 1.0 / math.sqrt(head_dim)
    scores = scores.reshape(batch, kv_heads, group, seq_len, n_keys)
    if attn_mask is not None:
        scores += attn_mask.astype(dtype, copy=False)
    elif is_causal and seq_len > 1:  # one query (a decode step) sees every row up to its own: nothing to mask
        rows = np.arange(start_pos, start_pos + seq_len)[:, None]
        scores[..., np.arange(n_keys)[None, :] > rows] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    result = scores.reshape(batch, kv_heads, group * seq_len, n_keys) @ v
    result = result.reshape(batch, kv_heads, group, seq_len, head_dim).transpose(0, 3, 1, 2, 4)
    out = resize(out, query.shape)
    np.copyto(out, result.reshape(query.shape), casting="unsafe")
    return out


def _decode_attention(
    query: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    n_keys: int,
    kv_heads: int,
    group: int,
    factor: np.float32,
    out: np.ndarray,
) -> np.ndarray:
    """One float32 query row against ``n_keys`` cache rows into the flat ``out`` (already at the query's shape):
    the same NumPy operations as the general path on the same matrices (so the same bits), in half the calls;
    a decode step makes 30 of these a token."""
    head_dim = query.shape[-1]
    scores = np.matmul(query.reshape(kv_heads, group, head_dim), keys[0, :n_keys].transpose(1, 2, 0))
    scores *= factor
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    np.matmul(scores, values[0, :n_keys].transpose(1, 0, 2), out=out.reshape(kv_heads, group, head_dim))
    return out


def _check_value(value: np.ndarray, cache: np.ndarray) -> None:
    """A cache write's value must have the cache's shape but along dim 1 (the positions written)."""
    if value.shape[0] != cache.shape[0] or value.shape[2:] != cache.shape[2:]:
        raise InvalidInputError(
            f"cache write expects a value shaped like the cache except dim 1 ({list(cache.shape)}); "
            f"found {list(value.shape)}"
        )


def _write(value: np.ndarray, cache: np.ndarray, start_pos: int) -> None:
    seq_len = value.shape[1]
    if not 0 <= start_pos or start_pos + seq_len > cache.shape[1]:
        raise OutOfRangeError(
            f"cache write of {seq_len} rows at position {start_pos} does not fit a cache of length "
            f"{cache.shape[1]}; keep start_pos + seq_len within the model's max context length"
        )
    _check_value(value, cache)
    cache[:, start_pos : start_pos + seq_len] = value


@kernel("llama::sdpa_with_kv_cache.out")
def sdpa_with_kv_cache(
    query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask, drpout_p, is_causal, scale, out
):
    _write(key, key_cache, start_pos)
    _write(value, value_cache, start_pos)
    return _attention(query, key_cache, value_cache, start_pos, attn_mask, is_causal, scale, out)


@kernel("llama::custom_sdpa.out")
def custom_sdpa(query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, out):
    return _attention(query, key, value, start_pos, attn_mask, is_causal, scale, out)


@kernel("llama::update_cache.out")
def update_cache(value, cache, start_pos, out):
    _write(value, cache, start_pos)
    return out


@kernel("llama::update_cache_with_indices.out")
def update_cache_with_indices(value, cache, start_pos, indices, out):
    """Row ``s`` of batch ``b`` of ``value`` goes to cache position ``indices[b, s]`` (``start_pos`` unused)."""
    if indices.ndim != 2 or indices.shape != value.shape[:2] or indices.dtype.kind not in "iu":
        raise InvalidInputError(
            f"update_cache_with_indices expects integer indices shaped [batch, seq_len] = {list(value.shape[:2])}; "
            f"found {indices.dtype} {list(indices.shape)}"
        )
    _check_value(value, cache)
    if indices.size and (indices.min() < 0 or indices.max() >= cache.shape[1]):
        raise OutOfRangeError(
            f"cache write at positions {indices.min()}..{indices.max()} does not fit a cache of length "
            f"{cache.shape[1]}; keep every index within the model's max context length"
        )
    cache[np.arange(value.shape[0])[:, None], indices] = value
    return out


def _dequantize_per_token(name: str, values: np.ndarray, zero_points: object, scales: object) -> np.ndarray:
    want = (*values.shape[:-1], 1)
    if values.dtype != np.int8 or not isinstance(zero_points, np.ndarray) or not isinstance(scales, np.ndarray):
        raise InvalidInputError(
            f"custom_quantized_sdpa expects an int8 {name} with its zero points and scales; found a {values.dtype} "
            f"{name}, zero points {type(zero_points).__name__}, scales {type(scales).__name__}"
        )
    if zero_points.shape != want or scales.shape != want:
        raise InvalidInputError(
            f"custom_quantized_sdpa expects the {name}'s zero points and scales shaped {list(want)} (one per token); "
            f"found {list(zero_points.shape)} and {list(scales.shape)}"
        )
    return (values.astype(np.float32) - zero_points.astype(np.float32)) * scales.astype(np.float32)


@kernel("llama::custom_quantized_sdpa.out")
def custom_quantized_sdpa(
    query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale,
    q_zero_points, q_scales, k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2, out,
):  # fmt: skip
    """Attention over int8 queries, keys and values quantized per token, dequantized to float32 first; with
    ``is_seq_at_dim_2`` every tensor (and the output) is ``[batch, heads, seq, head_dim]``."""
    q = _dequantize_per_token("query", query, q_zero_points, q_scales)
    k = _dequantize_per_token("key", key, k_zero_points, k_scales)
    v = _dequantize_per_token("value", value, v_zero_points, v_scales)
    if not is_seq_at_dim_2:
        return _attention(q, k, v, start_pos, attn_mask, is_causal, scale, out)
    q, k, v = (np.ascontiguousarray(t.transpose(0, 2, 1, 3)) for t in (q, k, v))
    result = _attention(q, k, v, start_pos, attn_mask, is_causal, scale, np.empty(q.shape, np.float32))
    out = resize(out, query.shape)
    out[...] = result.transpose(0, 2, 1, 3)
    return out
