"""The optional accelerated tier (``edgetorch[fast]``, numba): its depthwise convolution equals the NumPy
path bit for bit on every window shape, a lowered model gives the same outputs with the tier on and off, and
``EDGETORCH_FAST=0`` (or numba absent) leaves the pure-NumPy runtime complete."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner, fast
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime, policy
from edgetorch.runtime.kernels import windows, winograd

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


class Depthwise(torch.nn.Module):
    def __init__(self, channels: int, stride: int, padding: int, dilation: int, bias: bool, kernel: int = 3):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, kernel, stride, padding, dilation, groups=channels, bias=bias)

    def forward(self, x):
        return torch.nn.functional.relu6(self.conv(x))


def outputs(module: torch.nn.Module, x: torch.Tensor, tier: bool, monkeypatch, set_policy) -> np.ndarray:
    set_policy(compiled=tier)
    ep = torch.export.export(module.eval(), (x,))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0]


@needs_numba
@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "bias", "batch", "kernel"),
    [(1, 1, 1, True, 1, 3), (2, 1, 1, True, 2, 3), (1, 0, 1, False, 1, 3), (2, 2, 2, True, 1, 3),
     (1, 2, 2, False, 3, 3), (1, 2, 1, True, 1, 5), (2, 0, 1, True, 2, 2)],
)  # fmt: skip
def test_compiled_depthwise_equals_the_numpy_path(
    stride, padding, dilation, bias, batch, kernel, monkeypatch, set_policy
):
    """3x3 windows take the one-expression path inside the input and the tap-by-tap path on its border;
    other windows take the tap-by-tap path everywhere: both equal the NumPy tier bit for bit."""
    torch.manual_seed(0)
    module = Depthwise(12, stride, padding, dilation, bias, kernel)
    x = torch.randn(batch, 12, 11, 9)
    compiled = outputs(module, x, True, monkeypatch, set_policy)
    numpy_tier = outputs(module, x, False, monkeypatch, set_policy)
    np.testing.assert_array_equal(compiled, numpy_tier)
    np.testing.assert_allclose(compiled, module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


@needs_numba
def test_the_depthwise_rows_split_over_threads_give_the_bits_of_one(monkeypatch, set_policy, kernel_threads):

    torch.manual_seed(2)
    module, x = Depthwise(16, 2, 1, 1, True), torch.randn(3, 16, 13, 11)
    set_policy(split_outputs=1)
    kernel_threads(2)
    split = outputs(module, x, True, monkeypatch, set_policy)
    kernel_threads(1)
    serial = outputs(module, x, True, monkeypatch, set_policy)
    np.testing.assert_array_equal(split, serial)


def test_the_numpy_tier_runs_when_the_fast_tier_is_off(tmp_path):
    torch.manual_seed(1)
    module = Depthwise(8, 1, 1, 1, True).eval()
    x = torch.randn(1, 8, 6, 6)
    ep = torch.export.export(module, (x,))
    pte = tmp_path / "dw.pte"
    pte.write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    np.save(tmp_path / "x.npy", x.numpy())
    script = (
        "import sys, numpy as np\n"
        "from edgetorch.runtime import policy\n"
        "from edgetorch.runtime import Runtime\n"
        "assert not policy.compiled_tier()\n"
        f"m = Runtime.get().load_program(open({str(pte)!r}, 'rb').read()).load_method('forward')\n"
        f"np.save({str(tmp_path / 'y.npy')!r}, m.execute([np.load({str(tmp_path / 'x.npy')!r})])[0])\n"
        "assert 'numba' not in sys.modules\n"
    )
    env = {"EDGETORCH_FAST": "0", "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=str(tmp_path.parent), timeout=300)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


@needs_numba
def test_weights_read_in_place_are_packed_all_or_none_within_the_budget(monkeypatch, set_policy):
    from types import SimpleNamespace

    from edgetorch.backends.xnnpack import schema
    from edgetorch.backends.xnnpack.runtime import epilogues, float_layers

    w = np.ones((8, 32), np.float32)
    layers = [
        SimpleNamespace(xnode_union=schema.XNNFullyConnected(filter_id=f, flags=schema.FLAG_TRANSPOSE_WEIGHTS))
        for f in (1, 2)
    ]
    graph = SimpleNamespace(constants={1: w, 2: w}, packs_in_place=True)
    set_policy(pack_budget=2 * w.nbytes)
    assert float_layers.packs_in_place(graph, layers)
    set_policy(pack_budget=2 * w.nbytes - 1)  # both layers' weights pass the budget: neither is packed
    graph.packs_in_place = float_layers.packs_in_place(graph, layers)
    none = schema.INVALID_VALUE_ID
    assert not graph.packs_in_place
    assert float_layers.packed_gemm(w, graph, none, epilogues.NO_CLAMP, in_place=True) is None
    # a weight sgemm would copy anyway ([N, K] stored) is packed whatever the budget
    assert float_layers.packed_gemm(w, graph, none, epilogues.NO_CLAMP) is not None


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.qkv, self.proj = torch.nn.Linear(64, 192), torch.nn.Linear(64, 64)

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, 80, 3, 2, 32).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return torch.nn.functional.gelu(self.proj(y.transpose(1, 2).reshape(1, 80, 64)))


@needs_numba
def test_batch_matmuls_and_row_kernels_run_on_numbas_threads_with_blas_held(monkeypatch, set_policy, kernel_threads):
    """Attention's two batch matmuls take the batched packed GEMM, the softmax and GELU split over the threads
    (sizes past their thresholds), and the delegate then holds BLAS to one thread while it runs."""
    from edgetorch.backends.xnnpack.runtime import XnnpackBackend
    from edgetorch.runtime.kernels import compiled, gemm

    set_policy(split_elements=1)
    set_policy(split_macs=1)
    x = torch.randn(1, 80, 64, generator=torch.Generator().manual_seed(4))
    handles, init = [], XnnpackBackend.init

    def capture(self, *args):
        handles.append(init(self, *args))
        return handles[-1]

    monkeypatch.setattr(XnnpackBackend, "init", capture)
    kernel_threads(2)
    got = outputs(Attention(), x, True, monkeypatch, set_policy)
    (delegate,) = handles
    steps = [s for plan in delegate.schedules.values() for s in plan.steps]
    kernels = [s.args[0].func for s in steps if compiled.splits(s)]
    assert sum(s.args[0].func is gemm._batched for s in steps if compiled.splits(s)) == 2
    assert compiled.kernel("softmax") in kernels and compiled.kernel("gelu") in kernels
    assert all(schedule.own_threads for schedule in delegate.schedules.values())
    with torch.no_grad():
        np.testing.assert_allclose(got, Attention()(x).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got, outputs(Attention(), x, False, monkeypatch, set_policy), rtol=1e-4, atol=1e-5)


def _reference_columns(x, kh, kw, sh, sw, dh, dw, top, left, bottom, right):
    """im2col by NumPy: the padded input's windows, [N * OH * OW, KH * KW * C] in (ki, kj, c) order."""
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    n, hp, wp, c = xp.shape
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    taps = [
        xp[:, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
        for i in range(kh)
        for j in range(kw)
    ]
    return np.stack(taps, axis=3).reshape(n * oh * ow, kh * kw * c), oh, ow


@needs_numba
@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "dilation", "padding"),
    [((1, 9, 11, 3), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)), ((2, 12, 10, 16), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
     ((1, 20, 20, 3), (7, 7), (2, 2), (1, 1), (3, 3, 2, 3)), ((1, 8, 9, 5), (3, 2), (1, 2), (2, 2), (2, 0, 1, 1)),
     ((1, 6, 6, 4), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0))],
)  # fmt: skip
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_im2col_copies_the_windows_and_zeros_the_padding(
    shape, kernel, stride, dilation, padding, threads, monkeypatch, set_policy, kernel_threads
):
    x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
    top, left, bottom, right = padding
    want, oh, ow = _reference_columns(x, *kernel, *stride, *dilation, top, left, bottom, right)
    got = np.full_like(want, np.nan)
    set_policy(split_outputs=1)

    kernel_threads(threads)
    windows.im2col_step(x, got, oh, ow, *kernel, *stride, *dilation, top, left)()
    np.testing.assert_array_equal(got, want)


def _reference_max_pool(x, kh, kw, sh, sw, dh, dw, top, left, bottom, right):
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
    oh = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    y = np.full((x.shape[0], oh, ow, x.shape[3]), -np.inf, np.float32)
    for i in range(kh):
        for j in range(kw):
            np.maximum(y, xp[:, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw], y)
    return y


@needs_numba
@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "dilation", "padding"),
    [((1, 12, 12, 64), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)), ((2, 9, 7, 5), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0)),
     ((1, 10, 11, 8), (3, 2), (1, 2), (2, 1), (2, 1, 2, 0)), ((1, 11, 13, 8), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2))],
)  # fmt: skip
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_max_pool_equals_numpys_taps_and_keeps_nan(
    shape, kernel, stride, dilation, padding, threads, monkeypatch, set_policy, kernel_threads
):
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    x[0, 1, 2, :3] = np.nan
    top, left, bottom, right = padding
    want = _reference_max_pool(x, *kernel, *stride, *dilation, top, left, bottom, right)
    got = np.full_like(want, 7.0)
    set_policy(split_outputs=1)
    kernel_threads(threads)
    windows.max_pool_step(x, got, *kernel, *stride, *dilation, top, left)()
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got).any()


@needs_numba
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_add_clamp_gives_numpys_add_then_clip(threads, monkeypatch, set_policy, kernel_threads):
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((2, 9, 7, 40), dtype=np.float32), rng.standard_normal((2, 9, 7, 40), dtype=np.float32)
    a[0, 0, 0, :2] = np.nan
    set_policy(split_outputs=64)
    kernel_threads(threads)
    got = np.empty_like(a)
    fast.add_clamp(a, b, got, 0.0, 6.0)()
    np.testing.assert_array_equal(got, np.clip(a + b, np.float32(0), np.float32(6)))
    assert np.isnan(got[0, 0, 0, :2]).all()
    assert fast.add_clamp(a, b[:, :1], got, 0.0, 6.0) is None  # a broadcast: NumPy's add and clip


class Pool(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.max_pool2d(x, 3, 2, 1)


@needs_numba
def test_a_lowered_max_pooling_gives_the_numpy_tiers_bits(monkeypatch, set_policy):
    taken = []
    max_pool = windows.max_pool_step
    monkeypatch.setattr(windows, "max_pool_step", lambda *args: taken.append(max_pool(*args)) or taken[-1])
    x = torch.randn(2, 16, 15, 14, generator=torch.Generator().manual_seed(10))
    compiled_tier = outputs(Pool(), x, True, monkeypatch, set_policy)
    assert len(taken) == 1 and taken[0] is not None
    np.testing.assert_array_equal(compiled_tier, outputs(Pool(), x, False, monkeypatch, set_policy))
    np.testing.assert_array_equal(compiled_tier, Pool()(x).numpy())


class Stem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.conv = torch.nn.Conv2d(3, 16, 7, 2, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


@needs_numba
def test_an_image_input_and_a_strided_stem_give_eager_results_on_both_tiers(monkeypatch, set_policy):
    """The NCHW -> NHWC transpose of a 3-channel image copies channel by channel, and the stem's columns come
    from the compiled im2col: the same outputs as eager (and the NumPy tier) within float32 rounding."""
    x = torch.randn(2, 3, 40, 36, generator=torch.Generator().manual_seed(6))
    compiled_tier = outputs(Stem(), x, True, monkeypatch, set_policy)
    with torch.no_grad():
        np.testing.assert_allclose(compiled_tier, Stem()(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(compiled_tier, outputs(Stem(), x, False, monkeypatch, set_policy), rtol=1e-5, atol=1e-5)


class Block(torch.nn.Module):
    """A ResNet basic block: two 3x3 stride-1 convolutions (the first followed by batch norm and ReLU) and the
    residual."""

    def __init__(self, channels: int):
        super().__init__()
        torch.manual_seed(7)
        self.conv1 = torch.nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn = torch.nn.BatchNorm2d(channels)
        self.conv2 = torch.nn.Conv2d(channels, channels, 3, 1, 1)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x):
        return torch.relu(self.conv2(torch.relu(self.bn(self.conv1(x)))) + x)


@needs_numba
def test_3x3_convolutions_run_winograd_and_give_eager_results_on_both_tiers(monkeypatch, set_policy):
    """Both convolutions of the block (16 channels, 7 x 6 output tiles) take winograd.py's F(2x2, 3x3):
    eager's results within float32 rounding, as on the NumPy tier."""
    taken = []
    step = winograd.step
    monkeypatch.setattr(winograd, "step", lambda *args: taken.append(step(*args)) or taken[-1])
    x = torch.randn(1, 16, 14, 12, generator=torch.Generator().manual_seed(8))
    compiled_tier = outputs(Block(16), x, True, monkeypatch, set_policy)
    assert len(taken) == 2 and all(s is not None for s in taken)
    with torch.no_grad():
        np.testing.assert_allclose(compiled_tier, Block(16).eval()(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        compiled_tier, outputs(Block(16), x, False, monkeypatch, set_policy), rtol=1e-5, atol=1e-5
    )


@needs_numba
@pytest.mark.parametrize(
    ("shape", "perm"),
    [((8, 32, 12, 32), (0, 2, 1, 3)), ((1, 128, 3, 12, 64), (2, 0, 3, 1, 4)), ((5, 7, 16), (1, 0, 2)),
     ((2, 3, 4, 5, 16), (0, 2, 1, 3, 4))],
)  # fmt: skip
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_permute_copies_runs_of_the_last_axis_exactly(
    shape, perm, threads, monkeypatch, set_policy, kernel_threads
):

    x = np.random.default_rng(8).standard_normal(shape).astype(np.float32)
    view = x.transpose(perm)
    y = np.full(view.shape, np.nan, np.float32)
    set_policy(split_outputs=1)
    step = fast.permute(x, view, y)
    if sum(d != 1 for d in view.shape[:-1]) > 3:
        assert step is None  # four leading axes longer than 1: np.copyto keeps it
        return
    kernel_threads(threads)
    step()
    np.testing.assert_array_equal(y, view)


@needs_numba
def test_compiled_permute_declines_a_moved_last_axis():
    x = np.zeros((4, 8, 16), np.float32)
    view = x.transpose(0, 2, 1)
    assert fast.permute(x, view, np.empty(view.shape, np.float32)) is None


@needs_numba
@pytest.mark.parametrize(
    ("shape", "perm"),
    [((1, 3, 9, 11), (0, 2, 3, 1)), ((2, 3, 5, 4), (0, 2, 3, 1)), ((1, 4, 6, 7), (0, 2, 3, 1)),
     ((2, 5, 3), (0, 2, 1)), ((3, 2, 4, 5), (1, 3, 0, 2)), ((2, 1, 3, 2, 4, 3), (0, 3, 4, 5, 1, 2))],
)  # fmt: skip
@pytest.mark.parametrize("threads", [1, 2])
def test_compiled_gather_moves_a_short_axis_last_exactly(shape, perm, threads, set_policy, kernel_threads):
    """NCHW -> NHWC of RGB images (the unrolled three values a pixel), of four and five channels (the loop),
    and other permutations with a short strided last axis: the view's values, in place of np.copyto's; more
    than four axes longer than 1 are declined."""
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    view = x.transpose(perm)
    y = np.full(view.shape, np.nan, np.float32)
    set_policy(split_outputs=1)
    step = fast.gather(x, view, y)
    if sum(d != 1 for d in view.shape) > 4:
        assert step is None
        return
    kernel_threads(threads)
    step()
    np.testing.assert_array_equal(y, view)


class _DynamicMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


@needs_numba
@pytest.mark.parametrize("at_load", [True, False])
def test_a_delegate_keeps_the_tier_it_loaded_with_for_later_input_shapes(at_load, set_policy):
    """A delegate reads the tier once, when it loads: a schedule built later for a new input shape, after the
    policy changed, runs the kernels (and the weights packed at load) of that tier, and still gives eager's
    results."""
    torch.manual_seed(0)
    module = _DynamicMlp().eval()
    batch = torch.export.Dim("batch", min=1, max=64)
    ep = torch.export.export(module, (torch.randn(4, 16),), dynamic_shapes=({0: batch},))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    set_policy(compiled=at_load)
    method = Runtime.get().load_program(pte).load_method("forward")
    set_policy(compiled=not at_load)
    for rows in (4, 7, 1):
        x = torch.randn(rows, 16)
        got = method.execute([x.numpy()])[0]
        np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    delegates = [handle for _, handle in method._executor.delegates]
    assert delegates and all(d.graph.compiled is at_load for d in delegates)
    assert all(len(d.schedules) >= 2 for d in delegates)  # the new shapes were scheduled after the change
