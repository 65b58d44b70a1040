"""The ``llama`` operator library: ExecuTorch's LLM custom ops, for export.

``llama::sdpa_with_kv_cache`` writes new keys/values into the caches and attends over them,
``llama::custom_sdpa`` attends over caches written already, ``llama::update_cache`` writes one cache at a
position and ``llama::update_cache_with_indices`` at the positions an index tensor names;
``llama::custom_quantized_sdpa`` attends over int8 queries, keys and values quantized per token.
Schemas are ExecuTorch's (a ``.pte`` names these ops), and the real ``executorch`` package defines the
same namespace when its custom-ops module is imported, so this is a :class:`SharedLibrary`: edgetorch
uses ExecuTorch's definitions when they exist and hands its own over when ExecuTorch's module is
imported later. The eager kernels here are the reference math the runtime kernels
(``edgetorch.runtime.kernels.llama``) are tested against. Call :func:`ensure_registered` before use.
May import torch only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from edgetorch.exir.dialects.shared_library import SharedLibrary

_SDPA_ARGS = "Tensor? attn_mask=None, float drpout_p=0., bool is_causal=False, float? scale=None"
_QPARAMS = (
    "Tensor? q_zero_points=None, Tensor? q_scales=None, Tensor? k_zero_points=None, Tensor? k_scales=None, "
    "Tensor? v_zero_points=None, Tensor? v_scales=None, bool is_seq_at_dim_2=False"
)
_SCHEMAS = {
    "sdpa_with_kv_cache": "sdpa_with_kv_cache(Tensor query, Tensor key, Tensor value, Tensor(a!) key_cache, "
    f"Tensor(b!) value_cache, SymInt start_pos, SymInt seq_len, {_SDPA_ARGS}) -> Tensor",
    "sdpa_with_kv_cache.out": "sdpa_with_kv_cache.out(Tensor query, Tensor key, Tensor value, "
    "Tensor(a!) key_cache, Tensor(b!) value_cache, SymInt start_pos, SymInt seq_len, "
    f"{_SDPA_ARGS}, *, Tensor(c!) out) -> Tensor(c!)",
    "custom_sdpa": f"custom_sdpa(Tensor query, Tensor key, Tensor value, SymInt start_pos, {_SDPA_ARGS}) -> Tensor",
    "custom_sdpa.out": "custom_sdpa.out(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
    f"{_SDPA_ARGS}, *, Tensor(a!) out) -> Tensor(a!)",
    "update_cache": "update_cache(Tensor value, Tensor(a!) cache, SymInt start_pos) -> Tensor",
    "update_cache.out": "update_cache.out(Tensor value, Tensor(a!) cache, SymInt start_pos, *, "
    "Tensor(b!) out) -> Tensor(b!)",
    "update_cache_with_indices": "update_cache_with_indices(Tensor value, Tensor(a!) cache, SymInt start_pos, "
    "Tensor indices) -> Tensor",
    "update_cache_with_indices.out": "update_cache_with_indices.out(Tensor value, Tensor(a!) cache, "
    "SymInt start_pos, Tensor indices, *, Tensor(b!) out) -> Tensor(b!)",
    "custom_quantized_sdpa": f"custom_quantized_sdpa(Tensor query, Tensor key, Tensor value, SymInt start_pos, "
    f"{_SDPA_ARGS}, {_QPARAMS}) -> Tensor",
    "custom_quantized_sdpa.out": f"custom_quantized_sdpa.out(Tensor query, Tensor key, Tensor value, "
    f"SymInt start_pos, {_SDPA_ARGS}, {_QPARAMS}, *, Tensor(a!) out) -> Tensor(a!)",
}


def attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    start_pos: int,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Reference attention in ExecuTorch's ``[batch, seq, heads, head_dim]`` layout over the first cache rows.

    Without a mask the first ``start_pos + seq_len`` rows are read (causally if ``is_causal``); with a
    2-D additive mask ``[seq_len, n]``, the first ``n``. Key/value heads are shared by query-head groups.
    """
    seq_len = query.shape[1]
    n_keys = attn_mask.shape[-1] if attn_mask is not None else start_pos + seq_len
    group = query.shape[2] // keys.shape[2]
    k = keys[:, :n_keys].repeat_interleave(group, dim=2).transpose(1, 2).float()
    v = values[:, :n_keys].repeat_interleave(group, dim=2).transpose(1, 2).float()
    if attn_mask is not None:
        bias = attn_mask.float()
    else:  # an additive mask: 0 where a query sees a key, -inf where causality hides it
        bias = torch.zeros(seq_len, n_keys)
        if is_causal:
            rows = torch.arange(seq_len).unsqueeze(1) + start_pos
            bias = bias.masked_fill(torch.arange(n_keys).unsqueeze(0) > rows, float("-inf"))
    out = F.scaled_dot_product_attention(query.transpose(1, 2).float(), k, v, attn_mask=bias, scale=scale)
    return out.transpose(1, 2).to(query.dtype)


def _sdpa_with_kv_cache(
    query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask=None, drpout_p=0.0, is_causal=False,
    scale=None,
):  # fmt: skip
    _update_cache(key, key_cache, start_pos)
    _update_cache(value, value_cache, start_pos)
    return attention(query, key_cache, value_cache, start_pos, attn_mask, is_causal, scale)


def _sdpa_with_kv_cache_out(
    query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask=None, drpout_p=0.0, is_causal=False,
    scale=None, *, out,
):  # fmt: skip
    result = _sdpa_with_kv_cache(
        query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask, drpout_p, is_causal, scale
    )
    return out.resize_(result.shape).copy_(result)


def _custom_sdpa(query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None):
    return attention(query, key, value, start_pos, attn_mask, is_causal, scale)


def _custom_sdpa_out(
    query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None, *, out
):  # fmt: skip
    return out.resize_(query.shape).copy_(attention(query, key, value, start_pos, attn_mask, is_causal, scale))


def _update_cache(value, cache, start_pos):
    cache[:, start_pos : start_pos + value.shape[1]].copy_(value)
    return torch.empty((1,), dtype=value.dtype)


def _update_cache_out(value, cache, start_pos, *, out):
    _update_cache(value, cache, start_pos)
    return out


def _update_cache_with_indices(value, cache, start_pos, indices):
    """Row ``s`` of batch ``b`` of ``value`` goes to cache position ``indices[b, s]``; ``start_pos`` is unused."""
    cache[torch.arange(value.shape[0]).unsqueeze(1), indices] = value
    return torch.empty((1,), dtype=value.dtype)


def _update_cache_with_indices_out(value, cache, start_pos, indices, *, out):
    _update_cache_with_indices(value, cache, start_pos, indices)
    return out


def dequantize_per_token(values: torch.Tensor, zero_points: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 ``values`` as float32: ``(values - zero_point) * scale``, one pair per token (the last axis shared)."""
    return (values.to(torch.float32) - zero_points.to(torch.float32)) * scales.to(torch.float32)


def _custom_quantized_sdpa(
    query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
    q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None, v_scales=None,
    is_seq_at_dim_2=False,
):  # fmt: skip
    q = dequantize_per_token(query, q_zero_points, q_scales)
    k = dequantize_per_token(key, k_zero_points, k_scales)
    v = dequantize_per_token(value, v_zero_points, v_scales)
    if is_seq_at_dim_2:  # [batch, heads, seq, head_dim]: the attention reads [batch, seq, heads, head_dim]
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    out = attention(q, k, v, start_pos, attn_mask, is_causal, scale)
    return out.transpose(1, 2).contiguous() if is_seq_at_dim_2 else out


def _custom_quantized_sdpa_out(
    query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
    q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None, v_scales=None,
    is_seq_at_dim_2=False, *, out,
):  # fmt: skip
    result = _custom_quantized_sdpa(
        query, key, value, start_pos, attn_mask, drpout_p, is_causal, scale, q_zero_points, q_scales,
        k_zero_points, k_scales, v_zero_points, v_scales, is_seq_at_dim_2,
    )  # fmt: skip
    return out.resize_(result.shape).copy_(result)


def _check_attention(query, key_cache, value_cache):
    torch._check(query.dim() == 4 and key_cache.dim() == 4, lambda: "custom sdpa expects 4-D query and caches")
    torch._check(key_cache.shape == value_cache.shape, lambda: "key and value caches must have the same shape")
    torch._check(query.dtype == key_cache.dtype, lambda: "query and caches must share a dtype")


def _fake_sdpa_with_kv_cache(
    query, key, value, key_cache, value_cache, start_pos, seq_len, attn_mask=None, drpout_p=0.0, is_causal=False,
    scale=None,
):  # fmt: skip
    _check_attention(query, key_cache, value_cache)
    return torch.empty_like(query)


def _fake_custom_sdpa(query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None):
    _check_attention(query, key, value)
    return torch.empty_like(query)


def _fake_update_cache(value, cache, start_pos):
    torch._check(value.dim() == 4 and cache.dim() == 4, lambda: "update_cache expects 4-D value and cache")
    torch._check(start_pos >= 0)
    torch._check(start_pos + value.shape[1] <= cache.shape[1], lambda: "update_cache writes past the cache end")
    return value.new_empty((1,))


def _fake_update_cache_with_indices(value, cache, start_pos, indices):
    torch._check(value.dim() == 4 and cache.dim() == 4, lambda: "update_cache_with_indices expects 4-D tensors")
    torch._check(value.dtype == cache.dtype, lambda: "value and cache must share a dtype")
    torch._check(indices.dim() == 2 and indices.dtype == torch.int64, lambda: "indices must be 2-D int64")
    torch._check(
        indices.shape[0] == value.shape[0] and indices.shape[1] == value.shape[1],
        lambda: "indices must be [batch, seq_len] of the value",
    )
    return value.new_empty((1,))


def _fake_custom_quantized_sdpa(
    query, key, value, start_pos, attn_mask=None, drpout_p=0.0, is_causal=False, scale=None,
    q_zero_points=None, q_scales=None, k_zero_points=None, k_scales=None, v_zero_points=None, v_scales=None,
    is_seq_at_dim_2=False,
):  # fmt: skip
    torch._check(query.dim() == 4 and key.dim() == 4 and value.dim() == 4, lambda: "expects 4-D q, k and v")
    for name, t in (("query", query), ("key", key), ("value", value)):
        torch._check(t.dtype == torch.int8, lambda n=name: f"custom_quantized_sdpa expects an int8 {n}")
    params = (q_zero_points, q_scales, k_zero_points, k_scales, v_zero_points, v_scales)
    torch._check(all(p is not None for p in params), lambda: "every zero point and scale must be given")
    return torch.empty(query.shape, dtype=torch.float32)


LIBRARY = SharedLibrary(
    "llama",
    _SCHEMAS,
    {
        "sdpa_with_kv_cache": _sdpa_with_kv_cache,
        "sdpa_with_kv_cache.out": _sdpa_with_kv_cache_out,
        "custom_sdpa": _custom_sdpa,
        "custom_sdpa.out": _custom_sdpa_out,
        "update_cache": _update_cache,
        "update_cache.out": _update_cache_out,
        "update_cache_with_indices": _update_cache_with_indices,
        "update_cache_with_indices.out": _update_cache_with_indices_out,
        "custom_quantized_sdpa": _custom_quantized_sdpa,
        "custom_quantized_sdpa.out": _custom_quantized_sdpa_out,
    },
    "executorch.extension.llm.custom_ops.custom_ops",
    fakes={
        "sdpa_with_kv_cache": _fake_sdpa_with_kv_cache,
        "custom_sdpa": _fake_custom_sdpa,
        "update_cache": _fake_update_cache,
        "update_cache_with_indices": _fake_update_cache_with_indices,
        "custom_quantized_sdpa": _fake_custom_quantized_sdpa,
    },
)


def ensure_registered() -> None:
    """Make ``torch.ops.llama`` hold the LLM custom ops (ExecuTorch's if imported, else edgetorch's)."""
    LIBRARY.ensure_registered()
