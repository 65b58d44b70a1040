"""The ``llama::`` custom ops: eager kernels against plain attention math, runtime kernels against eager."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from edgetorch.extension.llm import custom_ops
from edgetorch.runtime.kernels import lookup

custom_ops.ensure_registered()


def _reference(q, k, v, start, n_keys, causal, mask=None, scale=None):
    """Attention written out with torch's own SDPA over the visible cache rows (GQA by repetition)."""
    group = q.shape[2] // k.shape[2]
    kk = k[:, :n_keys].repeat_interleave(group, 2).transpose(1, 2)
    vv = v[:, :n_keys].repeat_interleave(group, 2).transpose(1, 2)
    bias = torch.zeros(q.shape[1], n_keys)
    if causal:
        rows = torch.arange(q.shape[1])[:, None] + start
        bias = bias.masked_fill(torch.arange(n_keys)[None] > rows, float("-inf"))
    if mask is not None:
        bias = bias + mask[:, :n_keys]
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=bias, scale=scale)
    return out.transpose(1, 2)


def _tensors(seq=3, length=10, heads=4, kv_heads=2, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, seq, heads, dim, generator=g)
    k = torch.randn(1, length, kv_heads, dim, generator=g)
    v = torch.randn(1, length, kv_heads, dim, generator=g)
    return q, k, v


@pytest.mark.parametrize("start", [0, 2, 7])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_custom_sdpa_matches_reference(start, causal, kv_heads):
    q, k, v = _tensors(kv_heads=kv_heads)
    got = torch.ops.llama.custom_sdpa(q, k, v, start, None, 0.0, causal)
    torch.testing.assert_close(got, _reference(q, k, v, start, start + q.shape[1], causal))
    out = np.empty(q.shape, np.float32)
    fn, _ = lookup("llama::custom_sdpa.out")
    fn(q.numpy(), k.numpy(), v.numpy(), start, None, 0.0, causal, None, out)
    np.testing.assert_allclose(out, got.numpy(), rtol=1e-5, atol=1e-5)


def test_custom_sdpa_with_mask_and_scale():
    q, k, v = _tensors()
    mask = torch.randn(q.shape[1], 6)
    got = torch.ops.llama.custom_sdpa(q, k, v, 0, mask, 0.0, False, 0.3)
    torch.testing.assert_close(got, _reference(q, k, v, 0, 6, False, mask, scale=0.3))
    out = np.empty(q.shape, np.float32)
    lookup("llama::custom_sdpa.out")[0](q.numpy(), k.numpy(), v.numpy(), 0, mask.numpy(), 0.0, False, 0.3, out)
    np.testing.assert_allclose(out, got.numpy(), rtol=1e-5, atol=1e-5)


def test_sdpa_with_kv_cache_writes_and_attends():
    q, k_cache, v_cache = _tensors(length=12)
    _, k_new, v_new = _tensors(length=3, seed=1)
    start = 4
    k_np, v_np = k_cache.numpy().copy(), v_cache.numpy().copy()
    got = torch.ops.llama.sdpa_with_kv_cache(q, k_new, v_new, k_cache, v_cache, start, 3, None, 0.0, True)
    torch.testing.assert_close(k_cache[:, start : start + 3], k_new)
    torch.testing.assert_close(got, _reference(q, k_cache, v_cache, start, start + 3, True))
    out = np.empty(q.shape, np.float32)
    lookup("llama::sdpa_with_kv_cache.out")[0](
        q.numpy(), k_new.numpy(), v_new.numpy(), k_np, v_np, start, 3, None, 0.0, True, None, out
    )
    np.testing.assert_array_equal(k_np, k_cache.numpy())
    np.testing.assert_array_equal(v_np, v_cache.numpy())
    np.testing.assert_allclose(out, got.numpy(), rtol=1e-5, atol=1e-5)


def test_update_cache_and_bounds():
    _, cache, _ = _tensors(length=6)
    value = torch.randn(1, 2, 2, 8)
    ref = cache.clone()
    ref[:, 3:5] = value
    cache_np = cache.numpy().copy()
    torch.ops.llama.update_cache(value, cache, 3)
    torch.testing.assert_close(cache, ref)
    fn, nargs = lookup("llama::update_cache.out")
    assert nargs == 4
    fn(value.numpy(), cache_np, 3, np.empty(1, np.float32))
    np.testing.assert_array_equal(cache_np, ref.numpy())
    from edgetorch.errors import OutOfRangeError

    with pytest.raises(OutOfRangeError, match="does not fit"):
        fn(value.numpy(), cache_np, 5, np.empty(1, np.float32))


def _update_with_indices_reference(value, cache, indices):
    want = cache.clone()
    for b in range(value.shape[0]):
        for s, position in enumerate(indices[b].tolist()):
            want[b, position] = value[b, s]
    return want


def test_update_cache_with_indices_writes_where_told():
    _, cache, _ = _tensors(length=9, kv_heads=2)
    cache = torch.cat([cache, cache + 1])  # two batches
    value = torch.randn(2, 3, 2, 8)
    indices = torch.tensor([[8, 2, 5], [0, 7, 1]])
    want = _update_with_indices_reference(value, cache, indices)
    cache_np = cache.numpy().copy()
    torch.ops.llama.update_cache_with_indices(value, cache, 0, indices)
    torch.testing.assert_close(cache, want)
    fn, nargs = lookup("llama::update_cache_with_indices.out")
    assert nargs == 5
    fn(value.numpy(), cache_np, 0, indices.numpy(), np.empty(1, np.float32))
    np.testing.assert_array_equal(cache_np, want.numpy())
    from edgetorch.errors import InvalidInputError, OutOfRangeError

    with pytest.raises(OutOfRangeError, match="does not fit a cache of length 9"):
        fn(value.numpy(), cache_np, 0, indices.numpy() + 2, np.empty(1, np.float32))
    with pytest.raises(InvalidInputError, match=r"shaped \[batch, seq_len\]"):
        fn(value.numpy(), cache_np, 0, indices.numpy()[:, :2], np.empty(1, np.float32))


def _quantized(x: torch.Tensor):
    """``x`` quantized per token to int8 with torch's own decomposed ops, and the (zero points, scales) used."""
    from torch.ao.quantization.fx._decomposed import quantized_decomposed_lib  # noqa: F401

    ops = torch.ops.quantized_decomposed
    scales, zero_points = ops.choose_qparams_per_token_asymmetric(x, torch.int8)
    q = ops.quantize_per_token(x, scales, zero_points, -128, 127, torch.int8)
    dequantized = ops.dequantize_per_token(q, scales, zero_points, -128, 127, torch.int8, torch.float32)
    return q, zero_points.to(torch.int8), scales.to(torch.float32), dequantized


@pytest.mark.parametrize("seq_at_dim_2", [False, True])
@pytest.mark.parametrize("start", [0, 5])
def test_custom_quantized_sdpa_is_attention_over_dequantized_tensors(seq_at_dim_2, start):
    q, k, v = _tensors(seq=3, length=12, kv_heads=2)
    if seq_at_dim_2:
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    (qq, qz, qs, qd), (kq, kz, ks, kd), (vq, vz, vs, vd) = (_quantized(t) for t in (q, k, v))
    args = (qq, kq, vq, start, None, 0.0, True, None, qz, qs, kz, ks, vz, vs, seq_at_dim_2)
    got = torch.ops.llama.custom_quantized_sdpa(*args)
    if seq_at_dim_2:
        qd, kd, vd = (t.transpose(1, 2) for t in (qd, kd, vd))
    want = _reference(qd, kd, vd, start, start + 3, True)
    torch.testing.assert_close(got, want.transpose(1, 2) if seq_at_dim_2 else want)
    out = np.empty(qq.shape, np.float32)
    numpy_args = [a.numpy() if isinstance(a, torch.Tensor) else a for a in args]
    lookup("llama::custom_quantized_sdpa.out")[0](*numpy_args, out)
    np.testing.assert_allclose(out, got.numpy(), rtol=1e-5, atol=1e-5)
    from edgetorch.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="int8 query"):
        lookup("llama::custom_quantized_sdpa.out")[0](q.numpy(), *numpy_args[1:], out)


def test_executorch_custom_ops_import_after_ours():
    """ExecuTorch's own custom-ops library loads in a process where edgetorch registered ``llama`` first."""
    code = textwrap.dedent(
        """
        import torch
        from edgetorch.extension.llm import custom_ops
        custom_ops.ensure_registered()
        q = torch.randn(1, 2, 4, 8); k = torch.randn(1, 5, 2, 8); v = torch.randn(1, 5, 2, 8)
        ours = torch.ops.llama.custom_sdpa(q, k, v, 1, None, 0.0, True)
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
        assert not custom_ops.LIBRARY.defined_by_edgetorch
        theirs = torch.ops.llama.custom_sdpa(q, k, v, 1, None, 0.0, True)
        torch.testing.assert_close(ours, theirs)
        # edgetorch's eager kernels, called directly, against ExecuTorch's compiled ones (now the live definitions).
        from edgetorch.extension.llm.custom_ops import _custom_quantized_sdpa, _update_cache_with_indices
        value = torch.randn(1, 3, 2, 8); indices = torch.tensor([[4, 0, 2]])
        ours_cache, their_cache = torch.zeros(1, 6, 2, 8), torch.zeros(1, 6, 2, 8)
        _update_cache_with_indices(value, ours_cache, 0, indices)
        torch.ops.llama.update_cache_with_indices(value, their_cache, 0, indices)
        torch.testing.assert_close(ours_cache, their_cache)
        g = torch.Generator().manual_seed(0)
        qq, kq, vq = (torch.randint(-128, 128, s, dtype=torch.int8, generator=g) for s in [(1, 2, 4, 8), (1, 6, 2, 8), (1, 6, 2, 8)])
        zs = [torch.randint(-5, 5, (*t.shape[:-1], 1), dtype=torch.int8, generator=g) for t in (qq, kq, vq)]
        ss = [torch.rand(*t.shape[:-1], 1, generator=g) * 0.05 + 0.01 for t in (qq, kq, vq)]
        args = (qq, kq, vq, 3, None, 0.0, True, None, zs[0], ss[0], zs[1], ss[1], zs[2], ss[2], False)
        torch.testing.assert_close(_custom_quantized_sdpa(*args), torch.ops.llama.custom_quantized_sdpa(*args), atol=1e-4, rtol=1e-4)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")
