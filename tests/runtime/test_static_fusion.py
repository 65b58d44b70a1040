"""Load-time fusion in static methods (edgetorch.runtime.static_fusion) and the fast tier's 3x3 depthwise
convolution: batch norm with its clamp and the safe softmax give the same bits as the unfused instructions; the
depthwise kernel matches PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime, policy
from edgetorch.runtime import static_fusion as sf
from edgetorch.runtime.kernels import compiled, gemm
from edgetorch.runtime.kernels.registry import lookup

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


class _ConvBn(torch.nn.Module):
    """Convolutions with batch norms: followed by ReLU6, by ReLU, by nothing (an add reads the norm)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.c1, self.c2, self.c3 = (torch.nn.Conv2d(4, 4, 3, padding=1, groups=g_) for g_ in (1, 4, 1))
        self.b1, self.b2, self.b3 = (torch.nn.BatchNorm2d(4) for _ in range(3))
        for bn in (self.b1, self.b2, self.b3):
            bn.running_mean.copy_(torch.randn(4, generator=g))
            bn.running_var.copy_(torch.rand(4, generator=g) + 0.5)
            bn.weight.data.copy_(torch.randn(4, generator=g))
            bn.bias.data.copy_(torch.randn(4, generator=g))
        self.eval()

    def forward(self, x):
        h = torch.nn.functional.relu6(self.b1(self.c1(x)))
        h = torch.relu(self.b2(self.c2(h)))
        return self.b3(self.c3(h)) + h


class _Attention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _methods(module: torch.nn.Module, args: tuple):
    pte = to_edge(torch.export.export(module, args)).to_executorch().buffer
    fused = Runtime.get().load_program(pte).load_method("forward")
    plain = Runtime.get().load_program(pte).load_method("forward")
    plain._executor.fused = None
    return fused, plain


@pytest.mark.parametrize("tier", [True, False], ids=["compiled", "numpy"])
def test_batch_norm_and_its_clamp_fuse_to_the_same_bits(tier, monkeypatch, set_policy):
    if tier and not policy.compiled_tier():
        pytest.skip("numba is not installed")
    set_policy(compiled=tier)
    module = _ConvBn()
    x = torch.randn(2, 4, 9, 7, generator=torch.Generator().manual_seed(1)) * 3
    fused, plain = _methods(module, (x,))
    ex = fused._executor
    assert ex.fused is not None
    steps, _ = ex.fused
    # Three batch norms, each one step; two of them take their clamp along.
    assert len(ex.steps) - len(steps) == 2
    xs = [x.numpy(), np.where(x.numpy() > 0, np.nan, x.numpy()).astype(np.float32)]
    for inp in xs:
        got, want = fused.execute([inp])[0], plain.execute([inp])[0]
        np.testing.assert_array_equal(got, want)  # same bits, NaN where NaN
    with torch.no_grad():
        np.testing.assert_allclose(fused.execute([xs[0]])[0], module(x).numpy(), rtol=1e-5, atol=1e-5)


@needs_numba
def test_safe_softmax_fuses_and_zeroes_fully_masked_rows():
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool)
    fused, plain = _methods(_Attention(), (q, k, v, mask))
    ex = fused._executor
    assert ex.fused is not None
    assert len(ex.fused[0]) < len(ex.steps)
    masks = [np.ones((6, 6), bool), np.tril(np.ones((6, 6), bool)), np.zeros((6, 6), bool)]
    masks[1][2] = False  # query 2 attends to nothing: the safe softmax gives zeros, not NaN
    for m in masks:
        inputs = [q.numpy(), k.numpy(), v.numpy(), m]
        got, want = fused.execute(inputs)[0], plain.execute(inputs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(m)).numpy()
        np.testing.assert_allclose(got, np.nan_to_num(ref, nan=0.0), rtol=1e-5, atol=1e-6)
        assert not np.isnan(got).any()


@needs_numba
def test_the_zeroing_tail_after_a_delegated_softmax_fuses():
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower

    g = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    mask = torch.ones(6, 6, dtype=torch.bool)
    ep = torch.export.export(_Attention(), (q, k, v, mask))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    fused = Runtime.get().load_program(pte).load_method("forward")
    plain = Runtime.get().load_program(pte).load_method("forward")
    plain._executor.fused = None
    ex = fused._executor
    assert ex.fused is not None and len(ex.fused[0]) == len(ex.steps) - 4  # six instructions, full_like folded
    kernels = [getattr(step, "func", step) for step in ex.fused[0]]
    assert "_masked_rows" in {getattr(getattr(k, "py_func", k), "__name__", "") for k in kernels}
    m = np.tril(np.ones((6, 6), bool))
    m[3] = False
    inputs = [q.numpy(), k.numpy(), v.numpy(), m]
    got = fused.execute(inputs)[0]
    np.testing.assert_array_equal(got, plain.execute(inputs)[0])
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=torch.from_numpy(m)).numpy()
    np.testing.assert_allclose(got, np.nan_to_num(ref, nan=0.0), rtol=1e-5, atol=1e-6)
    assert not got[0, :, 3].any()


def test_a_fused_pass_never_reads_memory_it_has_partly_overwritten():
    a = np.zeros(64, np.float32)
    sf._same_or_apart(a[:32], a[:32])  # in place: fine
    sf._same_or_apart(a[:32], a[32:])  # apart: fine
    with pytest.raises(sf._NoMatch):
        sf._same_or_apart(a[8:40], a[:32])


@needs_numba
@pytest.mark.parametrize(
    "n, c, h, w, stride, padding",
    [(1, 3, 5, 5, 1, 1), (2, 5, 9, 40, 1, 1), (1, 4, 33, 34, 1, 1), (1, 6, 10, 11, 2, 1), (2, 3, 9, 9, 2, 1),
     (1, 2, 8, 8, 2, 0), (1, 7, 6, 5, 1, 0), (1, 3, 64, 64, 2, 1)],
)  # fmt: skip
def test_depthwise3x3_matches_torch_and_the_numpy_tier(n, c, h, w, stride, padding, monkeypatch, set_policy):
    g = torch.Generator().manual_seed(3)
    x, weight = torch.randn(n, c, h, w, generator=g), torch.randn(c, 1, 3, 3, generator=g)
    bias = torch.randn(c, generator=g)
    want = torch.nn.functional.conv2d(x, weight, bias, stride, padding, 1, c).numpy()
    fn, _ = lookup("aten::convolution.out")
    args = (x.numpy(), weight.numpy(), bias.numpy(), [stride] * 2, [padding] * 2, [1, 1], False, [0, 0], c)
    got = fn(*args, np.empty(want.shape, np.float32))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    set_policy(compiled=False)
    off = fn(*args, np.empty(want.shape, np.float32))
    np.testing.assert_allclose(got, off, rtol=1e-5, atol=1e-5)


class _Block(torch.nn.Module):
    """A ViT attention block: one qkv projection split by index, scaled dot-product attention, a projection."""

    def __init__(self, dim: int = 32, heads: int = 4):
        super().__init__()
        torch.manual_seed(4)
        self.qkv, self.proj, self.heads = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim), heads

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)  # unpacked
        h = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(h.transpose(1, 2).reshape(b, n, c)) + x


def _loaded(module: torch.nn.Module, args: tuple, monkeypatch=None, elide=None):
    import edgetorch.runtime.executor as executor

    if elide is not None:
        monkeypatch.setattr(executor, "elide_copies", elide)
    pte = to_edge(torch.export.export(module, args)).to_executorch().buffer
    return Runtime.get().load_program(pte).load_method("forward")


def test_static_copies_become_views_with_the_same_bits(monkeypatch):
    x = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(5))
    elided = _loaded(_Block(), (x,))
    names = [
        elided._executor.operators[elided._executor.instructions[pc].instr_args.op_index]
        for pc in elided._executor.elided
    ]
    assert {"aten::slice_copy.Tensor_out", "aten::expand_copy.out"} <= set(names)
    plain = _loaded(_Block(), (x,), monkeypatch, lambda ex, live: set())
    assert not plain._executor.elided and len(plain._executor.steps) - len(elided._executor.steps) == len(names)
    for seed in range(3):
        inp = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(seed)).numpy()
        np.testing.assert_array_equal(elided.execute([inp])[0], plain.execute([inp])[0])
    with torch.no_grad():
        np.testing.assert_allclose(elided.execute([x.numpy()])[0], _Block()(x).numpy(), rtol=1e-5, atol=1e-5)


def test_a_copy_whose_input_memory_is_reused_stays_a_copy(monkeypatch):
    """The memory plan reuses the qkv tensor's bytes once its three slices are copied out (the scores land
    there); a view of it would read the scores. Without the overwrite check the block's result is wrong."""
    from edgetorch.runtime.plan_analysis import PlanFacts

    x = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        want = _Block()(x).numpy()
    checked = _loaded(_Block(), (x,))
    np.testing.assert_allclose(checked.execute([x.numpy()])[0], want, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(PlanFacts, "written_over", lambda self, *args: False)
    reckless = _loaded(_Block(), (x,))
    assert len(reckless._executor.elided) > len(checked._executor.elided)
    assert not np.allclose(reckless.execute([x.numpy()])[0], want, rtol=1e-5, atol=1e-5)


class _Mlp(torch.nn.Module):
    """Linear layers followed by GELU (exact, tanh) and by residual adds with the residual on either side."""

    def __init__(self, dim: int = 16):
        super().__init__()
        torch.manual_seed(9)
        self.a, self.b, self.c, self.d = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        h = torch.nn.functional.gelu(self.a(x))
        h = torch.nn.functional.gelu(self.b(h), approximate="tanh")
        h = x + self.c(h)
        return self.d(h) + h


@needs_numba
def test_a_linear_layer_takes_its_gelu_or_residual_add_along_with_the_same_bits(monkeypatch, set_policy):
    set_policy(pack_budget=0)  # sgemm, as the unfused addmm: the packed GEMM rounds its own way
    x = torch.randn(5, 16, generator=torch.Generator().manual_seed(10)) * 3
    fused, plain = _methods(_Mlp(), (x,))
    ex = fused._executor
    assert ex.fused is not None
    assert len(ex.steps) - len(ex.fused[0]) == 4  # four linear layers, each with the instruction after it
    for seed in range(3):
        inp = (torch.randn(5, 16, generator=torch.Generator().manual_seed(seed)) * 4).numpy()
        np.testing.assert_array_equal(fused.execute([inp])[0], plain.execute([inp])[0])
    with torch.no_grad():
        np.testing.assert_allclose(fused.execute([x.numpy()])[0], _Mlp()(x).numpy(), rtol=1e-5, atol=1e-5)


def _runs_packed_gemm(step) -> bool:
    """Whether a fused step is the packed GEMM (gemm.PackedGemm.step: its serial kernel, or split over threads)."""
    if getattr(step, "func", None) is compiled.split:
        step = step.args[0]
    return getattr(step, "func", None) is gemm._gemm_blocks


class _Relus(torch.nn.Module):
    """Linear layers (addmm) with a ReLU, a residual add and nothing after them, and one without a bias (mm)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(13)
        self.a, self.b, self.c = torch.nn.Linear(20, 40), torch.nn.Linear(40, 24), torch.nn.Linear(24, 24)
        self.d = torch.nn.Linear(24, 7, bias=False)

    def forward(self, x):
        h = torch.nn.functional.relu6(torch.relu(self.b(torch.relu(self.a(x)))))
        return self.d(self.c(h) + h)


@needs_numba
def test_linear_layers_on_constant_weights_run_the_packed_gemm(monkeypatch, set_policy):
    x = torch.randn(9, 20, generator=torch.Generator().manual_seed(14))
    fused, plain = _methods(_Relus(), (x,))
    ex = fused._executor
    packed = [s for s in ex.fused[0] if _runs_packed_gemm(s)]
    # a, b and d; c's runs inside its residual add's step. The ReLUs stay steps of their own: the plan gives each
    # ReLU's output the memory of its layer's input, which the GEMM still reads while it writes.
    assert len(packed) == 3 and ex.own_threads
    for seed in range(3):
        inp = (torch.randn(9, 20, generator=torch.Generator().manual_seed(seed)) * 3).numpy()
        np.testing.assert_allclose(fused.execute([inp])[0], plain.execute([inp])[0], rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(fused.execute([x.numpy()])[0], _Relus()(x).numpy(), rtol=1e-5, atol=1e-5)
    # all or nothing: with room for some layers only, none is packed and BLAS keeps its threads
    set_policy(pack_budget=(20 * 40 + 40 * 24 + 24 * 24 + 24 * 7) * 4 - 1)
    budgeted, _ = _methods(_Relus(), (x,))
    assert not budgeted._executor.own_threads
    kept = [s for s in budgeted._executor.fused[0] if _runs_packed_gemm(s)]
    assert not kept


class _Pool(torch.nn.Module):
    def __init__(self, with_indices: bool):
        super().__init__()
        self.with_indices = with_indices

    def forward(self, x):
        y, i = torch.ops.aten.max_pool2d_with_indices(x * 2, [3, 3], [2, 2], [1, 1])
        return (y, i) if self.with_indices else y + 1


@pytest.mark.parametrize("with_indices", [False, True], ids=["values", "indices-read"])
def test_max_pooling_whose_indices_nothing_reads_computes_only_the_maxima(with_indices):
    x = torch.randn(2, 3, 9, 8, generator=torch.Generator().manual_seed(11))
    fused, plain = _methods(_Pool(with_indices), (x,))
    ex = fused._executor
    modules = {getattr(getattr(step, "func", None), "__module__", "") for step in ex.fused[0]}
    assert ("edgetorch.runtime.ops.pool" in modules) != with_indices  # the op layer's pooling, no indices
    nan = x.clone()
    nan[0, 1, 2, 3] = float("nan")
    for inp in (x, nan):
        got, want = fused.execute([inp.numpy()]), plain.execute([inp.numpy()])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(got[0], _Pool(with_indices)(inp)[0 if with_indices else ...].numpy())


class _Ops(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(6)

    def forward(self, x, y):
        a = torch.bmm(x, y.transpose(1, 2)) * 0.5
        b = (a - x.sum()) / (a + 3.0)
        return self.norm(b * a), torch.mm(x[0], y[0].T) / 2.0


def test_fixed_shape_float_kernels_bind_straight_to_numpy_with_the_same_bits():
    g = torch.Generator().manual_seed(12)
    x, y = torch.randn(2, 6, 4, generator=g), torch.randn(2, 6, 4, generator=g)
    fused, plain = _methods(_Ops(), (x, y))
    steps = fused._executor.fused[0]
    bound = {getattr(getattr(s, "func", None), "__name__", "") for s in steps}
    assert {"matmul", "multiply", "subtract", "divide", "add"} <= bound
    if policy.compiled_tier():
        assert "_layer_norm" in bound
    for seed in range(3):
        xs = [torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(seed)).numpy() for _ in range(2)]
        for got, want in zip(fused.execute(xs), plain.execute(xs)):
            np.testing.assert_array_equal(got, want)
    with torch.no_grad():
        for got, want in zip(fused.execute([x.numpy(), y.numpy()]), _Ops()(x, y)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


def test_a_traced_method_keeps_every_copy(monkeypatch, set_policy):
    set_policy(pack_budget=0)  # sgemm in both, for the same bits
    x = torch.randn(1, 10, 32, generator=torch.Generator().manual_seed(13))
    pte = to_edge(torch.export.export(_Block(), (x,))).to_executorch().buffer
    untraced = Runtime.get().load_program(pte).load_method("forward")
    traced = Runtime.get().load_program(pte, enable_etdump=True).load_method("forward")
    assert untraced._executor.elided and not traced._executor.elided
    np.testing.assert_array_equal(traced.execute([x.numpy()])[0], untraced.execute([x.numpy()])[0])


class _ConvHead(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(15)
        self.conv, self.head = torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.head(self.conv(x).mean((2, 3)))


@needs_numba
def test_a_method_whose_convolutions_outweigh_its_linear_layers_keeps_sgemm_and_blas_threads():
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(16))
    fused, _ = _methods(_ConvHead(), (x,))
    assert not fused._executor.own_threads
    with torch.no_grad():
        np.testing.assert_allclose(fused.execute([x.numpy()])[0], _ConvHead()(x).numpy(), rtol=1e-5, atol=1e-5)


class _PatchAttention(torch.nn.Module):
    """A ViT in small: a patch convolution (a few multiply-adds), then attention and linear layers (most)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(17)
        self.patch = torch.nn.Conv2d(3, 48, 4, 4)
        self.qkv, self.proj = torch.nn.Linear(48, 144), torch.nn.Linear(48, 48)
        self.fc1, self.fc2 = torch.nn.Linear(48, 192), torch.nn.Linear(192, 48)

    def forward(self, x):
        t = self.patch(x).flatten(2).transpose(1, 2).contiguous()  # [1, 64, 48]
        q, k, v = self.qkv(t).view(1, 64, 3, 2, 24).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        t = t + self.proj(y.transpose(1, 2).reshape(1, 64, 48))
        return t + self.fc2(torch.nn.functional.gelu(self.fc1(t)))


def _runs(step, name: str, fn) -> bool:
    """Whether a fused step is compiled kernel ``name`` (serial, or split over threads); for the batched GEMM
    (``fn`` gemm._batched), its call of that kernel with the scratch buffer."""
    if getattr(step, "func", None) is compiled.split:
        step = step.args[0]
    if fn is gemm._batched:
        return getattr(step, "func", None) is fn and step.args[0] is compiled.compiled(name, gemm._bmm)
    return getattr(step, "func", None) is compiled.compiled(name, fn)


@needs_numba
def test_a_method_of_linear_layers_and_one_small_convolution_runs_its_products_on_the_fast_tier():
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(18))
    fused, plain = _methods(_PatchAttention(), (x,))
    ex = fused._executor
    assert ex.own_threads
    steps = ex.fused[0]
    assert sum(_runs(s, "bmm", gemm._batched) for s in steps) == 2  # scores and weighted values
    assert any(_runs(s, "edgetorch.runtime.kernels.gemm._gemm_blocks", gemm._gemm_blocks) for s in steps)
    for seed in range(2):
        inp = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(seed)).numpy()
        np.testing.assert_allclose(fused.execute([inp])[0], plain.execute([inp])[0], rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(fused.execute([x.numpy()])[0], _PatchAttention()(x).numpy(), rtol=1e-4, atol=1e-5)


class _Gelus(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x * 2), torch.nn.functional.gelu(x - 1, approximate="tanh")


@needs_numba
def test_a_lone_gelu_binds_to_the_compiled_kernel_with_the_same_bits(monkeypatch, set_policy):
    set_policy(split_elements=64)  # split too (a method with no products holds BLAS)
    x = torch.randn(40, 50, generator=torch.Generator().manual_seed(19)) * 3
    fused, plain = _methods(_Gelus(), (x,))
    steps = fused._executor.fused[0]
    assert (
        sum(
            _runs(s, name, fn)
            for s in steps
            for name, fn in (("gelu", compiled._gelu), ("gelu_tanh", compiled._gelu_tanh))
        )
        == 2
    )
    for got, want in zip(fused.execute([x.numpy()]), plain.execute([x.numpy()])):
        np.testing.assert_array_equal(got, want)


class _StridedLinear(torch.nn.Module):
    """A linear layer on a transposed 3-D input, which torch decomposes into its weight expanded to the batch,
    then bmm."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(20)
        self.fc = torch.nn.Linear(24, 40)

    def forward(self, x):
        return self.fc(x.transpose(1, 2)) * 2


@needs_numba
def test_an_expanded_constant_weight_and_its_bmm_run_one_packed_gemm():
    x = torch.randn(3, 24, 10, generator=torch.Generator().manual_seed(21))
    fused, plain = _methods(_StridedLinear(), (x,))
    ex = fused._executor
    names = [ex.operators[ex.instructions[pc].instr_args.op_index] for pc in ex.step_pcs]
    assert "aten::expand_copy.out" in names and "aten::bmm.out" in names  # the decomposition this is about
    steps, pcs = ex.fused
    gemms = [
        pc for s, pc in zip(steps, pcs) if _runs(s, "edgetorch.runtime.kernels.gemm._gemm_blocks", gemm._gemm_blocks)
    ]
    assert [ex.operators[ex.instructions[pc].instr_args.op_index] for pc in gemms] == ["aten::expand_copy.out"]
    for seed in range(2):
        inp = torch.randn(3, 24, 10, generator=torch.Generator().manual_seed(seed)).numpy()
        np.testing.assert_allclose(fused.execute([inp])[0], plain.execute([inp])[0], rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        np.testing.assert_allclose(fused.execute([x.numpy()])[0], _StridedLinear()(x).numpy(), rtol=1e-5, atol=1e-5)
