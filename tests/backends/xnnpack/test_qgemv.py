"""The integer GEMV of the dynamically quantized fully connected (edgetorch/backends/xnnpack/qgemv.py, the
[fast] tier): each kernel against a float64 reference of XNNPACK's arithmetic on shapes that are not
multiples of the vector width, and whole quantized programs (written by ExecuTorch and by edgetorch) run with
the GEMV, with the per-call dequantize + sgemm of a larger input, and on the NumPy tier, each within one
quantization step of ExecuTorch's runtime."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgetorch.backends.xnnpack import qgemv
from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime import Runtime, get_num_threads, policy, set_num_threads
from edgetorch.runtime.kernels import compiled as compiled_kernels
from tests.interop.quantized_models import output_step, quantized
from tests.oracle import run_executorch

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)
INF = np.float32(np.inf)


def _inputs(rng, m, k, n):
    xc = rng.integers(-255, 256, (m, k)).astype(np.float32)  # centred int8: q - zero point
    xscale = rng.uniform(0.001, 0.05, (m, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    return xc, xscale, bias


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 * np.abs(want).max())


@needs_numba
@pytest.mark.parametrize(("m", "k", "n"), [(1, 37, 5), (3, 50, 33), (8, 100, 64), (2, 1, 3), (1, 300, 17)])
def test_qc8w_kernel_equals_reference(m, k, n, monkeypatch, set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 8))
    rng = np.random.default_rng(m * 1000 + k + n)
    xc, xscale, bias = _inputs(rng, m, k, n)
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    w[0] = 127  # the largest products: 255 * 127 * K, exact in int32
    xc[0] = 255
    wscale = rng.uniform(0.001, 0.02, n).astype(np.float32)
    dots = xc.astype(np.float64) @ w.T.astype(np.float64)
    for b, keep in ((bias, False), (None, True)):
        layer = qgemv.IntegerLinear.qc8w(w, wscale, b, keep)
        want = dots * xscale * wscale + (0 if b is None else b)
        y = np.empty((m, n), np.float32)
        for step in layer.steps(xc, xscale, y, -np.inf, np.inf):
            step()
        _close(y, want)
        lo, hi = np.float32(-0.5), np.float32(0.25)
        for step in layer.steps(xc, xscale, y, lo, hi):
            step()
        _close(y, np.clip(want, lo, hi))
        deq = layer.dequantized()
        _close(deq[:, :k], w * wscale[:, None])
        np.testing.assert_array_equal(deq[:, k], 0 if b is None else b)
        assert (layer.dequantized() is deq) == keep


@needs_numba
@pytest.mark.parametrize("seed", range(12))
def test_qc8w_kernel_rounds_bit_for_bit(seed, monkeypatch, set_policy):
    # 1 to 8 rows (the kernel's blocks of 4, 2 and 1 rows), K below, at and off its 16-input chunks, with and
    # without the prefetch (a small program makes none), bias and clamps, and the extreme products (+-255
    # inputs on -128 / 127 weights): every float32 result identical to the arithmetic in its written order.
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 8))
    rng = np.random.default_rng(seed)
    m, k, n = seed % 8 + 1, [1, 15, 16, 17, 31, 48, 100, 576, 784, 333, 1024, 1000][seed], int(rng.integers(1, 300))
    xc, xscale, bias = _inputs(rng, m, k, n)
    w = rng.integers(-128, 128, (n, k)).astype(np.int8)
    w[0], w[n // 2], w[n - 1, ::2] = -128, 127, -128
    xc[0] = 255
    xc[m - 1, ::3] = -255
    wscale = (rng.uniform(0.001, 0.02, n) * rng.choice([-1, 1], n)).astype(np.float32)
    b = bias if seed % 2 else None
    lo, hi = (np.float32(-0.5), np.float32(0.25)) if seed % 3 == 0 else (-INF, INF)
    layer = qgemv.IntegerLinear.qc8w(w, wscale, b, keep=seed % 4 < 2)
    y = np.full((m, n), np.nan, np.float32)
    for step in layer.steps(xc, xscale, y, lo, hi):
        step()
    dots = xc.astype(np.int64) @ w.T.astype(np.int64)  # exact, and within int32
    want = dots.astype(np.float32) * xscale * wscale
    if b is not None:
        want = want + b
    want = np.minimum(np.maximum(want, lo), hi)
    np.testing.assert_array_equal(y.view(np.int32), want.view(np.int32))


def _pack(w):
    """XNNPACK's QB4W packing: inputs 2j and 2j + 1 in the low and high nibble of byte j, + 8."""
    u = (w + 8).astype(np.uint8)
    return u[:, 0::2] | (u[:, 1::2] << 4)


@needs_numba
@pytest.mark.parametrize(
    ("m", "k", "n", "block"), [(1, 32, 5, 32), (3, 96, 40, 32), (4, 256, 64, 128), (2, 64, 33, 32), (1, 256, 3, 64)]
)
def test_qb4w_kernel_equals_reference(m, k, n, block, monkeypatch, set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 8))
    rng = np.random.default_rng(m * 1000 + k + n + block)
    xc, xscale, bias = _inputs(rng, m, k, n)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    w[0] = -8  # the largest products
    xc[0] = -255
    packed, scales = _pack(w), rng.uniform(0.001, 0.02, (n, k // block)).astype(np.float32)
    blocks = (xc.astype(np.float64).reshape(m, 1, -1, block) * w.reshape(1, n, -1, block)).sum(-1)  # exact ints
    dots = (blocks * scales).sum(-1)
    for b, keep in ((bias, False), (None, True)):
        layer = qgemv.IntegerLinear.qb4w(packed, scales, block, n, k, b, keep)
        want = dots * xscale + (0 if b is None else b)
        y = np.full((m, n), np.nan, np.float32)
        for step in layer.steps(xc, xscale, y, -np.inf, np.inf):
            step()
        _close(y, want)
        deq = layer.dequantized()
        _close(deq[:, :k], (w.reshape(n, -1, block) * scales[:, :, None]).reshape(n, k))
        np.testing.assert_array_equal(deq[:, k], 0 if b is None else b)
        assert (layer.dequantized() is deq) == keep


def _qb4w_float32(xc, w, scales, block, xscale, bias, lo, hi):
    """The QB4W node's float32 arithmetic, step by step as the kernel rounds it: each block's exact integer dot
    as float32, times its scale, summed in block order; times the row's scale; plus the bias; clamped."""
    m, k = xc.shape
    n = w.shape[0]
    dots = (xc.astype(np.int64).reshape(m, 1, -1, block) * w.reshape(1, n, -1, block).astype(np.int64)).sum(-1)
    total = np.zeros((m, n), np.float32)
    for b in range(k // block):
        total = total + dots[:, :, b].astype(np.float32) * scales[:, b]
    v = total * xscale
    if bias is not None:
        v = v + bias
    return np.minimum(np.maximum(v, lo), hi)


@needs_numba
@pytest.mark.parametrize("seed", range(12))
def test_qb4w_kernel_rounds_bit_for_bit(seed, monkeypatch, set_policy):
    # Random shapes (any N, blocks of 16 to 256 inputs), with and without bias and clamps, and the extreme
    # 8-byte sums of the kernel's 16-bit lanes (+-255 inputs on -8 weights: +-16 * 2040): every float32 result
    # identical to the arithmetic in its written order.
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    rng = np.random.default_rng(seed)
    block = int(rng.choice([16, 32, 64, 128, 256]))
    m, k, n = int(rng.integers(1, 17)), block * int(rng.integers(1, 5)), int(rng.integers(1, 300))
    xc, xscale, bias = _inputs(rng, m, k, n)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    w[: n // 2 + 1 : 2] = -8
    w[1::3, ::2] = 7
    xc[0, : k // 2], xc[0, k // 2 :] = 255, -255  # on channel 0's -8 weights: 8-byte sums of -32640 and 32640
    scales = (rng.uniform(0.001, 0.02, (n, k // block)) * rng.choice([-1, 1], (n, k // block))).astype(np.float32)
    b = bias if seed % 2 else None
    lo, hi = (np.float32(-0.5), np.float32(0.25)) if seed % 3 == 0 else (-INF, INF)
    if seed % 4 < 2:  # the bytes of all N channels in one group (the layout of wide layers), else groups of 64
        set_policy(gemv_wide=n)
    layer = qgemv.IntegerLinear.qb4w(_pack(w), scales, block, n, k, b)
    y = np.full((m, n), np.nan, np.float32)
    for step in layer.steps(xc, xscale, y, lo, hi):
        step()
    want = _qb4w_float32(xc, w, scales, block, xscale, b, lo, hi)
    np.testing.assert_array_equal(y.view(np.int32), want.view(np.int32))


@needs_numba
def test_qb4w_blocks_the_kernel_does_not_take(monkeypatch, set_policy):
    # Blocks of a multiple of 16 inputs only (the kernel sums 8 bytes at a time): the node dequantizes others.
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 8))
    w = np.zeros((4, 8), np.uint8)
    assert qgemv.IntegerLinear.qb4w(w, np.ones((4, 2), np.float32), 8, 4, 16, None) is None
    assert qgemv.IntegerLinear.qb4w(w, np.ones((4, 1), np.float32), 16, 4, 16, None) is not None


@needs_numba
@pytest.mark.parametrize("kind", ["qc8w", "qb4w"])
def test_dequantized_matmul_equals_reference(kind, monkeypatch, set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 8))
    m, k, n = 3, 64, 135  # QB4W: 2 groups of 64 channels and a partial one
    rng = np.random.default_rng(7)
    xa = np.ones((m, k + 1), np.float32)
    xa[:, :k] = rng.standard_normal((m, k))
    bias = rng.standard_normal(n).astype(np.float32)
    if kind == "qc8w":
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        wscale = rng.uniform(0.001, 0.02, n).astype(np.float32)
        layers = [qgemv.IntegerLinear.qc8w(w, wscale, bias)]
        floats = w * wscale[:, None].astype(np.float64)
    else:
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        scales = rng.uniform(0.001, 0.02, (n, k // 32)).astype(np.float32)
        layers = [qgemv.IntegerLinear.qb4w(_pack(w), scales, 32, n, k, bias)]  # groups of 64, the last partial
        set_policy(gemv_wide=n)
        layers.append(qgemv.IntegerLinear.qb4w(_pack(w), scales, 32, n, k, bias))  # all N in one group
        floats = (w.reshape(n, -1, 32) * scales[:, :, None].astype(np.float64)).reshape(n, k)
    for layer in layers:
        y = np.full((m, n), np.nan, np.float32)
        layer.matmul(xa, y)
        _close(y, xa[:, :k].astype(np.float64) @ floats.T + bias)


def _executorch_written(model: str, scheme: str):
    from tests.backends.xnnpack.test_xnnpack_quantized_runtime import executorch_xnnpack_pte

    _, args, ep, pte = executorch_xnnpack_pte(model, scheme)
    return args, ep, pte


def _edgetorch_written(model: str, scheme: str):
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower

    _, args, ep = quantized(model, scheme)
    return args, ep, to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


@needs_numba
@pytest.mark.parametrize(
    ("writer", "scheme"),
    [(_executorch_written, "8da4w"), (_executorch_written, "8da8w"), (_edgetorch_written, "dynamic")]
    + [(_edgetorch_written, "8da4w")],
)
def test_programs_on_every_path_within_one_step_of_executorch(writer, scheme, monkeypatch, set_policy):
    args, ep, pte = writer("mlp", scheme)  # 8 input rows
    inputs = [a.numpy() for a in args]
    theirs = np.asarray(run_executorch(pte, list(args))[0])
    step = output_step(ep, theirs) * 1.001
    used: set[str] = set()

    def recording(name, make):
        def made(*args, **kwargs):
            layer = make(*args, **kwargs)
            if layer is not None:
                used.add(name)
            return layer

        return made

    for name in ("qc8w", "qb4w"):  # the weights stay integers for the compiled GEMV (or VNNI GEMM)
        make = getattr(qgemv.IntegerLinear, name)
        monkeypatch.setattr(qgemv.IntegerLinear, name, staticmethod(recording(name, make)))
    # The GEMV for all 8 rows; sgemm (the GEMV takes 1 row) on float32 weights kept after the first call, or
    # dequantized per call (no budget for kept weights); the NumPy tier.
    for rows, budget, tier in ((8, 0, True), (1, 16 << 20, True), (1, 0, True), (8, 0, False)):
        set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, rows))
        set_policy(gemv_float_budget=budget)
        set_policy(compiled=tier)
        used.clear()
        method = Runtime.get().load_program(pte).load_method("forward")
        for _ in range(2):  # the second call runs on kept float32 weights
            ours = method.execute(inputs)[0]
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=step, err_msg=f"rows {rows}, budget {budget}")
        assert bool(used) == tier, used


@pytest.fixture
def threads():
    """Restores the thread-count setting a test changes."""
    saved = policy.current()
    yield
    policy.install(saved)


@needs_numba
@pytest.mark.parametrize("kind", ["qc8w", "qb4w"])
@pytest.mark.parametrize(("m", "k", "n", "tiles"), [(1, 64, 200, 2), (3, 96, 333, 3), (16, 32, 64, 2), (2, 48, 5, 2)])
def test_split_across_threads_is_bit_identical(kind, m, k, n, tiles, threads, monkeypatch, set_policy):
    # Every call split (SPLIT_MACS 0), QB4W weights laid out in ``tiles`` tiles (the last one partial, a channel
    # count off GROUP): run on 1, 2, 3 and 4 threads (more threads than parts, or than this machine's cores, is
    # allowed), every output equal bit for bit to the arithmetic in its written order. A part dropped leaves
    # NaN behind; a part run on the wrong channels gives other numbers.
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    set_policy(gemv_split_macs=0)
    rng = np.random.default_rng(m * 1000 + k + n)
    xc, xscale, bias = _inputs(rng, m, k, n)
    lo, hi = np.float32(-0.5), np.float32(0.25)
    set_num_threads(tiles)  # QB4W's tiles are laid out at load, one a thread
    layers = []
    if kind == "qc8w":
        w = rng.integers(-128, 128, (n, k)).astype(np.int8)
        wscale = rng.uniform(0.001, 0.02, n).astype(np.float32)
        layers.append(qgemv.IntegerLinear.qc8w(w, wscale, bias))
        want = (xc.astype(np.int64) @ w.T.astype(np.int64)).astype(np.float32) * xscale * wscale + bias
        want = np.minimum(np.maximum(want, lo), hi)
        floats = w * wscale[:, None].astype(np.float64)
    else:
        w = rng.integers(-8, 8, (n, k)).astype(np.int8)
        scales = rng.uniform(0.001, 0.02, (n, k // 16)).astype(np.float32)
        for wide in (policy.current().gemv_wide, n):  # tiles of groups of 64 channels, and tiles of one group each
            set_policy(gemv_wide=wide)
            layers.append(qgemv.IntegerLinear.qb4w(_pack(w), scales, 16, n, k, bias))
            assert layers[-1].weights[0].shape[0] == min(tiles, -(-n // qgemv.GROUP))
        want = _qb4w_float32(xc, w, scales, 16, xscale, bias, lo, hi)
        floats = (w.reshape(n, -1, 16) * scales[:, :, None].astype(np.float64)).reshape(n, k)
    for layer in layers:
        for count in (1, 2, 3, 4):
            set_num_threads(count)
            y = np.full((m, n), np.nan, np.float32)
            (step,) = layer.steps(xc, xscale, y, lo, hi)
            step()  # as the program runs it: split unless numba's threading layer is its workqueue
            np.testing.assert_array_equal(y.view(np.int32), want.view(np.int32), err_msg=f"{count} threads")
            if (
                step.func is not compiled_kernels.split
            ):  # one part only: QC8W below 2 GROUPs of channels, QB4W in one tile
                assert (kind == "qc8w" and n < 2 * qgemv.GROUP) or layer.weights[0].shape[0] == 1
                continue
            y[:] = np.nan
            step.args[1](count)  # the threaded kernel itself, in count parts
            np.testing.assert_array_equal(y.view(np.int32), want.view(np.int32), err_msg=f"{count} parts")
        deq = layer.dequantized()  # the sgemm path's weights, from the same tiles
        _close(deq[:, :k], floats)
        np.testing.assert_array_equal(deq[:, k], bias)


@needs_numba
def test_small_calls_and_one_thread_are_not_split(threads, monkeypatch, set_policy):
    # Below SPLIT_MACS multiply-adds a call runs the serial kernel itself, with no thread-count check; above it,
    # a step that picks the serial or the threaded kernel when it runs.
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    set_num_threads(2)
    n, k = 256, 64
    w = np.ones((n, k), np.int8)
    layer = qgemv.IntegerLinear.qc8w(w, np.ones(n, np.float32), None)
    x, xs = np.ones((1, k), np.float32), np.ones((1, 1), np.float32)
    y = np.empty((1, n), np.float32)
    set_policy(gemv_split_macs=n * k + 1)
    (step,) = layer.steps(x, xs, y, -np.inf, np.inf)
    assert step.func is qgemv.qc8w() and step.args[-1] == 1
    set_policy(gemv_split_macs=n * k)
    (step,) = layer.steps(x, xs, y, -np.inf, np.inf)
    assert step.func is compiled_kernels.split
    step()
    np.testing.assert_array_equal(y, k)
    # A small program's layer (one that keeps float32 weights, whose float layers run on BLAS's threads) never
    # splits, whatever its size.
    small = qgemv.IntegerLinear.qc8w(w, np.ones(n, np.float32), None, keep=True)
    (small_step,) = small.steps(x, xs, y, -np.inf, np.inf)
    assert small_step.func is qgemv.qc8w() and small_step.args[-1] == 1
    # On numba's workqueue layer the first split is the last: later calls run the serial kernel.
    calls = []
    serial, threaded = step.args[0], step.args[1]
    monkeypatch.setattr(compiled_kernels, "SPLITS", None)
    monkeypatch.setattr(compiled_kernels, "_threading_layer", lambda: "workqueue")
    for _ in range(2):
        compiled_kernels.split(lambda: calls.append("serial") or serial(), lambda p: calls.append(p) or threaded(p), 4)
    assert calls == [2, "serial"] and compiled_kernels.SPLITS is False


@needs_numba
@pytest.mark.parametrize("count", [1, 2, 3, 5, 7, 64, 1000])
def test_parts_share_the_channels_once(count):
    # Each part's share of the channels (or tiles): together every one exactly once (a channel run twice would
    # not change the output), in order, sizes at most one apart.
    qgemv.qb4w()  # binds the compiled helpers
    for parts in range(1, 9):
        shares = [qgemv._share(p, parts, count) for p in range(parts)]
        taken = [c for first, last in shares for c in range(first, last)]
        assert taken == list(range(count)), (parts, shares)
        sizes = [last - first for first, last in shares]
        assert max(sizes) - min(sizes) <= 1


def test_thread_count_setting(threads, monkeypatch, set_policy):
    set_num_threads(3)
    assert get_num_threads() == 3
    set_num_threads(np.int64(1))
    assert get_num_threads() == 1
    for bad in (0, -2, 1.5, True, "two", None):
        with pytest.raises(InvalidArgumentError, match="expected a positive whole number of threads, got .*; pass 1"):
            set_num_threads(bad)
    assert get_num_threads() == 1
    set_policy(threads=None)  # not set: the environment, else the CPUs
    monkeypatch.delenv("EDGETORCH_NUM_THREADS", raising=False)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert get_num_threads() == cpus
    set_policy(threads=None)
    monkeypatch.setenv("EDGETORCH_NUM_THREADS", "5")
    assert get_num_threads() == 5
    set_policy(threads=None)
    monkeypatch.setenv("EDGETORCH_NUM_THREADS", "0")
    with pytest.raises(InvalidArgumentError, match="EDGETORCH_NUM_THREADS: expected a positive whole number"):
        get_num_threads()


def test_thread_count_setting_without_numba():
    # The setting is part of the runtime, not of the [fast] tier: it works, and imports no numba, on the NumPy
    # tier; a program's quantized linears then run sgemm whatever the count (the integer GEMV's weights are
    # not even made: asked for, they say the tier is off).
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import edgetorch.runtime as rt\n"
        "from edgetorch.backends.xnnpack import qgemv\n"
        "from edgetorch.runtime.policy import TierOffError\n"
        "rt.set_num_threads(2)\n"
        "assert rt.get_num_threads() == 2\n"
        "try:\n"
        "    qgemv.IntegerLinear.qc8w(np.ones((64, 64), 'int8'), np.ones(64, 'float32'), None)\n"
        "    raise SystemExit('no TierOffError')\n"
        "except TierOffError:\n"
        "    pass\n"
        "assert 'numba' not in sys.modules\n"
    )
    env = {**os.environ, "EDGETORCH_FAST": "0", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@needs_numba
def test_row_counts_above_the_gemv_rows_share_one_decision_a_power_of_two(tuned, set_policy):
    """Up to GEMV_ROWS rows every row count is measured on its own; above them one decision serves a power-of-two
    bucket (measured at its top), so a prompt of a new length costs no new measurement, and the layer answers it
    without asking tuning again (its memo holds a decision a bucket, whatever lengths come)."""
    from edgetorch.backends.xnnpack import qgemv_vnni
    from edgetorch.runtime import tuning

    set_policy(tune=True, kernel_choices={})
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (24, 40)).astype(np.int8)
    layer = qgemv.IntegerLinear.qc8w(w, rng.uniform(0.001, 0.02, 24).astype(np.float32), None, False)
    small = qgemv_vnni.GEMV_ROWS
    with tuning.recording() as log:
        answers = {rows: layer.uses_gemv(rows) for rows in (small - 1, small, small + 1, 30, 32, 33, 64, 40, 63)}
    keys = [decision.key.split(":")[1].split("x")[0] for _, decision in log]
    assert keys == [str(small - 1), str(small), "32", "64"]
    assert [decision.reason for _, decision in log] == [tuning.MEASURED] * 4
    assert answers[30] == answers[32] == answers[small + 1] and answers[40] == answers[63] == answers[33]
    assert len(layer.chosen) == 4
