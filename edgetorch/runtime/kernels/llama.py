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
            scores = np.empty(n_keys, np.float32)  # one compiled pass (compiled.py), if numba is loaded anyway
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


def _write(value: np.ndarray, cache: np.ndarray, start_pos: int) -> None:
    seq_len = value.shape[1]
    if not 0 <= start_pos or start_pos + seq_len > cache.shape[1]:
        raise OutOfRangeError(
            f"cache write of {seq_len} rows at position {start_pos} does not fit a cache of length "
            f"{cache.shape[1]}; keep start_pos + seq_len within the model's max context length"
        )
    if value.shape[0] != cache.shape[0] or value.shape[2:] != cache.shape[2:]:
        raise InvalidInputError(
            f"cache write expects a value shaped like the cache except dim 1 ({list(cache.shape)}); "
            f"found {list(value.shape)}"
        )
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
