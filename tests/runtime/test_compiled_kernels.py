"""The compiled tier of the portable kernels (edgetorch/runtime/kernels/compiled.py, numba): GELU (exact and
tanh), softmax and layer norm in one pass each, equal to the NumPy tier within float32 rounding, with NaN and infinity kept as torch keeps
them; the portable kernels and the XNNPACK runtime half take them when the tier is on, and not when it is off."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.runtime import Runtime, policy
from edgetorch.runtime.kernels import compiled
from edgetorch.runtime.kernels.registry import lookup

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _both_tiers(name: str, monkeypatch, set_policy, *args) -> tuple[np.ndarray, np.ndarray]:
    """The portable kernel ``name`` on ``args`` with the compiled tier on, then off."""
    fn, _ = lookup(name)
    results = []
    for tier in (True, False):
        set_policy(compiled=tier)
        results.append(fn(*args[:-1], np.empty_like(args[-1])))
    return results[0], results[1]


@needs_numba
def test_compiled_gelu_matches_the_numpy_tier_and_erfc(monkeypatch, set_policy):
    x = np.concatenate([np.linspace(-9, 9, 20001), np.geomspace(1e-20, 1, 300), -np.geomspace(1e-20, 1, 300)])
    x = x.astype(np.float32).reshape(-1, 7)
    on, off = _both_tiers("aten::gelu.out", monkeypatch, set_policy, x, "none", x)
    np.testing.assert_allclose(on, off, rtol=4e-6, atol=1e-30)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.reshape(-1).astype(np.float64)])
    ulps = np.abs(on.reshape(-1) - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps[np.abs(x.reshape(-1)) <= 3].max() <= 8


@needs_numba
def test_compiled_gelu_special_values(monkeypatch, set_policy):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 40.0, -40.0, 1e30, -1e30, 3e-39], np.float32)
    on, _ = _both_tiers("aten::gelu.out", monkeypatch, set_policy, x, "none", x)
    want = np.array([np.nan, np.inf, 0.0, 0.0, 0.0, 40.0, 0.0, 1e30, 0.0, 1.5e-39], np.float32)
    np.testing.assert_allclose(on, want, rtol=1e-6, atol=1e-44)


@needs_numba
def test_compiled_tanh_gelu_matches_the_numpy_tier(monkeypatch, set_policy):
    x = np.concatenate([np.linspace(-12, 12, 20001), np.geomspace(1e-20, 1, 300), -np.geomspace(1e-20, 1, 300)])
    x = x.astype(np.float32)
    on, off = _both_tiers("aten::gelu.out", monkeypatch, set_policy, x, "tanh", x)
    np.testing.assert_allclose(on, off, rtol=2e-6, atol=2e-7)
    x64 = x.astype(np.float64)  # x / (1 + e^(-2u)): torch's formula without its cancellation for x < 0
    want = x64 / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64**3)))
    ulps = np.abs(on - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps[np.abs(x) <= 3].max() <= 16
    special = np.array([np.nan, np.inf, -np.inf, 0.0, 1e30, -1e30], np.float32)
    got, _ = _both_tiers("aten::gelu.out", monkeypatch, set_policy, special, "tanh", special)
    np.testing.assert_array_equal(got, np.array([np.nan, np.inf, 0.0, 0.0, 1e30, 0.0], np.float32))


@needs_numba
def test_compiled_softmax_matches_the_numpy_tier(monkeypatch, set_policy):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 11, 37)) * 6).astype(np.float32)
    x[0, 0, 1, 5] = -np.inf  # one masked position
    x[0, 0, 2, :] = -np.inf  # a fully masked row: NaNs, as in torch
    x[0, 1, 3, 7] = np.nan
    x[1, 2, 4, :] = 80.0  # large and equal
    on, off = _both_tiers("aten::_softmax.out", monkeypatch, set_policy, x, -1, False, x)
    np.testing.assert_allclose(on, off, rtol=2e-6, atol=1e-12, equal_nan=True)
    want = torch.softmax(torch.from_numpy(x), -1).numpy()
    np.testing.assert_allclose(on, want, rtol=2e-6, atol=1e-12, equal_nan=True)
    assert np.array_equal(np.isnan(on), np.isnan(want))


@needs_numba
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("normalized", [(24,), (3, 8)])
def test_compiled_layer_norm_matches_the_numpy_tier_and_torch(affine, normalized, monkeypatch, set_policy):
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((2, 5) + normalized) * 4 + 3).astype(np.float32)
    w = rng.standard_normal(normalized).astype(np.float32) if affine else None
    b = rng.standard_normal(normalized).astype(np.float32) if affine else None
    fn, _ = lookup("aten::native_layer_norm.out")
    stats = x.shape[: x.ndim - len(normalized)] + (1,) * len(normalized)
    results = []
    for tier in (True, False):
        set_policy(compiled=tier)
        outs = (np.empty_like(x), np.empty(stats, np.float32), np.empty(stats, np.float32))
        results.append([a.copy() for a in fn(x, list(normalized), w, b, 1e-5, *outs)])
    for on, off in zip(*results):
        np.testing.assert_allclose(on, off, rtol=2e-6, atol=1e-6)
    tw, tb = (None, None) if not affine else (torch.from_numpy(w), torch.from_numpy(b))
    want = torch.native_layer_norm(torch.from_numpy(x), list(normalized), tw, tb, 1e-5)
    for got, ref in zip(results[0], want):
        np.testing.assert_allclose(got, ref.numpy(), rtol=2e-6, atol=2e-6)


@needs_numba
@pytest.mark.parametrize("tier", [True, False])
def test_the_kernels_take_the_compiled_tier_only_when_it_is_on(tier, monkeypatch, set_policy):
    set_policy(compiled=tier)
    used = []
    real = compiled.kernel
    monkeypatch.setattr(compiled, "kernel", lambda name: used.append(name) or real(name))
    x = np.random.default_rng(1).standard_normal((4, 9)).astype(np.float32)
    lookup("aten::gelu.out")[0](x, "none", np.empty_like(x))
    lookup("aten::gelu.out")[0](x, "tanh", np.empty_like(x))
    lookup("aten::_softmax.out")[0](x, -1, False, np.empty_like(x))
    stats = [np.empty((4, 1), np.float32) for _ in range(2)]
    lookup("aten::native_layer_norm.out")[0](x, [9], None, None, 1e-5, np.empty_like(x), *stats)
    got = {name for name in used if real(name) is not None}
    assert got == ({"gelu", "gelu_tanh", "softmax", "layer_norm"} if tier else set())


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc(x))
        return torch.softmax(h @ h.transpose(-1, -2), -1)


@needs_numba
@pytest.mark.parametrize("delegated", [True, False])
def test_programs_match_across_tiers(delegated, monkeypatch, set_policy):
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(2, 5, 16)
    ep = torch.export.export(model, (x,))
    manager = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]) if delegated else to_edge(ep)
    pte = manager.to_executorch().buffer
    outs = []
    for tier in (True, False):
        set_policy(compiled=tier)
        set_policy(compiled=tier)
        outs.append(Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


@needs_numba
def test_the_compiled_exp_is_within_one_ulp():
    assert compiled.kernel("softmax") is not None  # compiles the scalar helpers the kernels inline
    x = np.linspace(-87.3, 88.3, 4001).astype(np.float32)  # the range its callers keep to
    got = np.array([compiled._exp(v) for v in x], np.float64)
    want = np.exp(x.astype(np.float64))
    assert (np.abs(got - want) / np.spacing(want.astype(np.float32))).max() <= 1


@needs_numba
@pytest.mark.parametrize(("heads", "kv_heads", "n"), [(9, 3, 1), (9, 3, 47), (4, 4, 200), (8, 2, 513)])
def test_compiled_decode_attention_matches_the_numpy_tier_and_float64(heads, kv_heads, n, monkeypatch, set_policy):
    # llama::custom_sdpa for one query over a KV cache (a decode step), grouped-query heads included. The kernel
    # is taken only when numba is loaded anyway (compiled.kernel_if_loaded).
    import numba  # noqa: F401

    rng = np.random.default_rng(n)
    length, dim = 600, 64
    keys = rng.standard_normal((1, length, kv_heads, dim)).astype(np.float32)
    values = rng.standard_normal((1, length, kv_heads, dim)).astype(np.float32)
    query = (3 * rng.standard_normal((1, 1, heads, dim))).astype(np.float32)
    on, off = _both_tiers(
        "llama::custom_sdpa.out", monkeypatch, set_policy, query, keys, values, n - 1, None, 0.0, True, None, query
    )
    np.testing.assert_allclose(on, off, rtol=2e-5, atol=2e-6)
    q = query[0, 0].astype(np.float64).reshape(kv_heads, heads // kv_heads, dim)
    k, v = keys[0, :n].astype(np.float64), values[0, :n].astype(np.float64)
    scores = np.einsum("hgd,nhd->hgn", q, k) / math.sqrt(dim)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    want = np.einsum("hgn,nhd->hgd", weights / weights.sum(-1, keepdims=True), v).reshape(heads, dim)
    np.testing.assert_allclose(on.reshape(heads, dim), want, rtol=1e-4, atol=1e-5)


def test_decode_attention_alone_does_not_import_numba():
    # A program whose only compiled-tier kernel would be the decode attention (an fp32 LLM) keeps NumPy's path
    # rather than paying numba's import (~150 MB resident).
    code = (
        "import sys, numpy as np\n"
        "from edgetorch.runtime.kernels.registry import lookup\n"
        "fn, _ = lookup('llama::custom_sdpa.out')\n"
        "k = np.ones((1, 8, 2, 4), np.float32); q = np.ones((1, 1, 4, 4), np.float32)\n"
        "fn(q, k, k, 3, None, 0.0, True, None, np.empty_like(q))\n"
        "print('numba' in sys.modules)\n"
    )
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.strip() == "False", result.stderr[-2000:]


def _row_case(name: str, rows: int, n: int) -> tuple:
    """The arguments of row kernel ``name`` over [rows, n] float32 (the GELUs over rows * n elements)."""
    rng = np.random.default_rng(21)
    x = (rng.standard_normal((rows, n)) * 3).astype(np.float32)
    out = np.full_like(x, np.nan)
    bias = rng.standard_normal(n).astype(np.float32)
    if name in ("gelu", "gelu_tanh"):
        return x.reshape(-1), out.reshape(-1)
    if name == "softmax":
        x[1] = -np.inf  # a fully masked row, zeros with ``safe``
        return x, out, True
    if name == "layer_norm":
        return x, bias, bias * 2, np.float32(1e-5), out, np.empty(rows, np.float32), np.empty(rows, np.float32)
    if name == "bias_gelu":
        return x, bias, out, False
    return x, bias, x * 2, out  # bias_add


@needs_numba
@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "softmax", "layer_norm", "bias_gelu", "bias_add"])
def test_row_kernels_split_over_threads_give_the_bits_of_one_thread(name, kernel_threads):
    one, two = _row_case(name, 37, 1024), _row_case(name, 37, 1024)
    kernel_threads(1)
    step = compiled.rows_step(name, *one)
    assert compiled.splits(step)  # 37 x 1024 elements: past SPLIT_ELEMENTS
    step()
    kernel_threads(2)
    compiled.rows_step(name, *two)()
    for a, b in zip(one, two):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)
    output = {"gelu": 1, "gelu_tanh": 1, "softmax": 1, "layer_norm": 4, "bias_gelu": 2, "bias_add": 3}[name]
    assert not np.isnan(one[output]).any()  # every row written
    serial = _row_case(name, 37, 1024)
    compiled.kernel(name)(*serial)
    for a, b in zip(one, serial):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


@needs_numba
def test_small_row_kernels_stay_on_the_calling_thread():
    args = _row_case("softmax", 4, 64)
    step = compiled.rows_step("softmax", *args)
    assert not compiled.splits(step) and not compiled.splits(None)
    step()
    np.testing.assert_allclose(args[1][0].sum(), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(args[1][1], 0.0)
