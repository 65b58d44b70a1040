"""Kernel choice by measuring the host (runtime/tuning.py): the decision rules, the on-disk cache (per host,
corrupt or unwritable files), and the GEMM family's candidates computing the same result."""

import json

import numpy as np
import pytest

from edgetorch.runtime import policy, tuning


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """Tuning on, with an empty cache directory of its own."""
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", str(tmp_path))
    tuning.forget()
    with policy.using(tune=True, kernel_choices={}):
        yield tmp_path
    tuning.forget()


def _candidates(calls, slow="slow"):
    """Two candidates: ``slow`` works 2 ms a call (tuning times the thread's CPU time, which a sleep does not
    spend), the other returns at once; ``calls`` counts the calls."""

    def build():
        def fast():
            calls["fast"] = calls.get("fast", 0) + 1

        def busy():
            calls[slow] = calls.get(slow, 0) + 1
            _busy(0.002)

        return {"fast": fast, slow: busy}

    return build


def _busy(seconds):
    """Keep this thread's CPU busy for ``seconds`` of its own CPU time."""
    import time

    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not tuning._FINE_THREAD_CLOCK, reason="the thread CPU clock is coarser than a microsecond here")
def test_times_are_the_threads_cpu_time_unless_the_candidates_are_threaded():
    """A candidate that waits (a sleep: the thread descheduled, as a busy neighbour makes it) costs no CPU time
    and must not lose to one that works; a family whose candidates run other threads is timed by the wall clock,
    where the wait counts."""
    import time

    candidates = {"waits": lambda: time.sleep(0.004), "works": lambda: _busy(0.001)}
    by_cpu = tuning.measure(candidates, seconds=0.1)
    assert by_cpu["waits"] < by_cpu["works"], by_cpu
    by_wall = tuning.measure(candidates, seconds=0.1, threaded=True)
    assert by_wall["waits"] > by_wall["works"] >= 0.001, by_wall


def test_measures_once_then_reads_the_cache(cache):
    calls = {}
    first = tuning.choose("demo", "8x8", ["slow", "fast"], _candidates(calls))
    assert (first.kernel, first.reason) == ("fast", tuning.MEASURED)
    assert first.times["slow"] > first.times["fast"]
    assert 2 <= calls["fast"] <= 1 + tuning.REPEATS
    saved = json.loads((cache / tuning.FILE_NAME).read_text())
    assert saved["format"] == tuning.FORMAT and len(saved["hosts"]) == 1
    tuning.forget()  # a new process: read back from disk, nothing timed
    calls.clear()
    again = tuning.choose("demo", "8x8", ["slow", "fast"], _candidates(calls))
    assert (again.kernel, again.reason, calls) == ("fast", tuning.CACHED, {})
    assert "slow" in again.describe() and "cached" in again.describe()


def test_off_fixed_only_and_budget(cache):
    calls = {}
    with policy.using(tune=False):
        assert tuning.choose("demo", "a", ["slow", "fast"], _candidates(calls)).reason == tuning.POLICY_OFF
    with policy.using(kernel_choices={"demo": "fast"}):
        assert tuning.choose("demo", "a", ["slow", "fast"], _candidates(calls)).kernel == "fast"
    with policy.using(kernel_choices={"demo:a": "slow", "demo": "fast"}):
        d = tuning.choose("demo", "a", ["slow", "fast"], _candidates(calls))
        assert (d.kernel, d.reason) == ("slow", tuning.FIXED)
    assert tuning.choose("demo", "a", ["slow"], _candidates(calls)).reason == tuning.ONLY
    assert calls == {}  # none of these timed anything
    with tuning.loading():
        tuning._BUDGET.local.spent = tuning.LOAD_SECONDS
        d = tuning.choose("demo", "b", ["slow", "fast"], _candidates(calls))
        assert (d.kernel, d.reason, calls) == ("slow", tuning.BUDGET, {})
    with tuning.loading():  # the next load has its own budget
        assert tuning.choose("demo", "b", ["slow", "fast"], _candidates(calls)).reason == tuning.MEASURED


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 1, "hosts": {"x": {"k": {"a": "eval(1)"}}}}'])
def test_corrupt_file_is_ignored_and_rewritten(cache, content):
    (cache / tuning.FILE_NAME).write_text(content)
    assert tuning.choose("demo", "c", ["slow", "fast"], _candidates({})).reason == tuning.MEASURED
    saved = json.loads((cache / tuning.FILE_NAME).read_text())
    assert any("demo|c" in decisions for decisions in saved["hosts"].values())


def test_unwritable_directory_keeps_decisions_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", str(blocker / "edgetorch"))  # under a file: no directory can be made
    tuning.forget()
    try:
        with policy.using(tune=True):
            calls = {}
            assert tuning.choose("demo", "d", ["slow", "fast"], _candidates(calls)).reason == tuning.MEASURED
            assert tuning.choose("demo", "d", ["slow", "fast"], _candidates(calls)).reason == tuning.CACHED
    finally:
        tuning.forget()
    assert blocker.read_text() == ""


def test_cache_dir_order(monkeypatch, tmp_path):
    monkeypatch.delenv("EDGETORCH_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tuning.cache_dir() == tmp_path / "edgetorch"
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", str(tmp_path / "own"))
    assert tuning.cache_dir() == tmp_path / "own"
    assert set(tuning.host()) >= {"cpu", "flags", "edgetorch", "numpy", "numba", "llvmlite"}


def test_recording_names_the_node(cache):
    with tuning.recording() as log:
        tuning.choose("demo", "e", ["slow"], _candidates({}), where="node 3")
    assert [(w, d.kernel, d.reason) for w, d in log] == [("node 3", "slow", tuning.ONLY)]


@pytest.mark.parametrize("rows,k,n", [(1, 7, 5), (6, 16, 16), (13, 40, 33), (64, 96, 130)])
@pytest.mark.parametrize("bias,act", [(False, (-np.inf, np.inf)), (True, (0.0, 6.0))])
def test_gemm_candidates_agree(rows, k, n, bias, act):
    from edgetorch.runtime.kernels import gemm

    if not policy.compiled_tier():
        pytest.skip("the packed GEMM needs the [fast] tier")
    rng = np.random.default_rng(rows * k + n)
    w = rng.standard_normal((k, n), dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32) if bias else None
    x = rng.standard_normal((rows, k), dtype=np.float32)
    packed = gemm.PackedGemm(w, b, *act)
    outs = {}
    for name, weights in (("packed", None), ("sgemm", w), ("sgemm transposed view", np.asfortranarray(w))):
        y = np.full((rows, n), np.nan, np.float32)
        step = packed.step(x, y) if weights is None else gemm.sgemm_step(x, weights, b, *act, y)
        step()
        outs[name] = y
    expected = np.clip(x.astype(np.float64) @ w + (0 if b is None else b), *act)
    for name, y in outs.items():
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k), err_msg=name)


def test_choose_linear_measures_both(cache):
    from edgetorch.runtime.kernels import gemm

    if not policy.compiled_tier():
        pytest.skip("the packed GEMM needs the [fast] tier")
    w = np.ones((32, 48), np.float32)
    d = gemm.choose_linear(gemm.PackedGemm(w, None), w, 24)
    assert d.reason == tuning.MEASURED and set(d.times) == set(gemm.linear_kernels())
    assert d.kernel == min(d.times, key=d.times.get)
    with policy.using(kernel_choices={"gemm": "sgemm"}):
        assert gemm.choose_linear(gemm.PackedGemm(w, None), w, 24).kernel == "sgemm"


@pytest.mark.parametrize("kind", ["qc8w", "qb4w"])
@pytest.mark.parametrize("rows", [1, 5, 24])
def test_qgemv_candidates_agree(kind, rows):
    """The integer GEMV and sgemm on the dequantized weights, the two candidates of a dynamically quantized
    fully connected, compute the same layer."""
    from edgetorch.backends.xnnpack import qgemv

    if not policy.compiled_tier():
        pytest.skip("the integer GEMV needs the [fast] tier")
    rng = np.random.default_rng(rows)
    n, k, block = 48, 64, 32
    bias = rng.standard_normal(n, dtype=np.float32)
    if kind == "qc8w":
        w = rng.integers(-127, 128, (n, k)).astype(np.int8)
        wscale = rng.uniform(0.001, 0.01, n).astype(np.float32)
        layer = qgemv.IntegerLinear.qc8w(w, wscale, bias)
        dense = w.astype(np.float64) * wscale[:, None]
    else:
        codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        scales = rng.uniform(0.001, 0.01, (n, k // block)).astype(np.float32)
        layer = qgemv.IntegerLinear.qb4w(packed, scales, block, n, k, bias)
        dense = (codes.astype(np.float64) - 8) * np.repeat(scales, block, axis=1)
    assert layer is not None
    xc = rng.integers(-128, 128, (rows, k)).astype(np.float32)
    xscale = rng.uniform(0.01, 0.02, (rows, 1)).astype(np.float32)
    gemv, sgemm = np.empty((rows, n), np.float32), np.empty((rows, n), np.float32)
    for step in layer.steps(xc, xscale, gemv, -np.inf, np.inf):
        step()
    layer.matmul(np.hstack([xc * xscale, np.ones((rows, 1), np.float32)]), sgemm)
    expected = (xc * xscale) @ dense.T + bias
    np.testing.assert_allclose(gemv, expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(sgemm, expected, rtol=1e-4, atol=1e-3)
    with policy.using(tune=True, kernel_choices={"qgemv": "sgemm"}):
        assert not layer.uses_gemv(1)
    with policy.using(tune=False):
        assert layer.uses_gemv(rows) == (rows <= layer.max_rows)


def test_choose_linear_times_part_of_a_large_product(cache, monkeypatch, set_policy):
    from edgetorch.runtime.kernels import gemm

    if not policy.compiled_tier():
        pytest.skip("the packed GEMM needs the [fast] tier")
    set_policy(tune_macs=6 * 32 * 40)
    w = np.ones((32, 100), np.float32)
    shapes = []
    real = gemm.PackedGemm.step

    def step(self, x2, y2, kernel="packed"):
        shapes.append(y2.shape)
        return real(self, x2, y2, kernel)

    monkeypatch.setattr(gemm.PackedGemm, "step", step)
    d = gemm.choose_linear(gemm.PackedGemm(w, None), w, 6)
    # 40 channels rounded down to whole panels, for each packed variant
    assert d.key == "6x32x100" and shapes == [(6, 32)] * len(gemm.packed_kernels())


@pytest.mark.parametrize("delegated", [False, True], ids=["portable", "xnnpack"])
def test_programs_agree_whichever_kernel_each_layer_runs(delegated, cache):
    """A linear program loaded with every layer's choice fixed to each candidate, and once measured: same
    results as eager within float32 rounding, and the decisions are the ones asked for."""
    torch = pytest.importorskip("torch")
    from edgetorch.exir import to_edge, to_edge_transform_and_lower
    from edgetorch.runtime import Runtime
    from edgetorch.runtime.kernels import gemm

    if not policy.compiled_tier():
        pytest.skip("the packed GEMM needs the [fast] tier")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 8)).eval()
    x = torch.randn(10, 24)
    ep = torch.export.export(model, (x,))
    if delegated:
        from edgetorch.backends.xnnpack import XnnpackPartitioner

        pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    else:
        pte = to_edge(ep).to_executorch().buffer
    want = model(x).detach().numpy()
    for choices in ({"gemm": "packed"}, {"gemm": "sgemm"}, {}):
        with policy.using(kernel_choices=choices), tuning.recording() as log:
            method = Runtime.get().load_program(pte).load_method("forward")
            got = method.execute([x.numpy()])[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert len(log) == 2 and all(d.family == "gemm" and d.key.startswith("10x") for _, d in log)
        expected = {choices["gemm"]} if choices else set(gemm.linear_kernels())
        assert {d.kernel for _, d in log} <= expected
        assert all(d.reason == (tuning.FIXED if choices else tuning.MEASURED) for _, d in log)


def test_host_reads_the_first_processor(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    block = "processor\t: {}\nmodel name\t: Example CPU {}\nflags\t\t: sse2 avx2 fma{}\n\n"
    info.write_text(block.format(0, 1, "") + block.format(1, 2, " avx512f"))
    monkeypatch.setattr(tuning, "CPUINFO", str(info))
    assert tuning._cpu() == ("Example CPU 1", "avx2 fma sse2")
    first = tuning.host()
    info.write_text(block.format(0, 1, " avx512f"))  # another ISA: another host key
    assert tuning.host()["flags"] != first["flags"] and tuning.host()["cpu"] == first["cpu"]


def test_qb4w_tile_layout_follows_the_measured_winner(cache, set_policy):
    """A QB4W layer that would be split over two threads is laid out in two tiles only where the host measured
    the split faster than one tile on the calling thread (family ``qb4w-tiles``); both layouts give the same bits."""
    from edgetorch.backends.xnnpack import qgemv
    from edgetorch.runtime import set_num_threads

    if not policy.compiled_tier():
        pytest.skip("the integer GEMV needs the [fast] tier")
    rng = np.random.default_rng(3)
    n, k, block = 256, 64, 16
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
    scales = rng.uniform(0.001, 0.01, (n, k // block)).astype(np.float32)
    set_policy(gemv_split_macs=0)
    set_num_threads(2)
    outputs, layouts = [], {}
    xc = rng.integers(-128, 128, (1, k)).astype(np.float32)
    xscale = np.full((1, 1), 0.01, np.float32)
    for fixed in ("split", "one-tile", None):
        with policy.using(kernel_choices={"qb4w-tiles": fixed} if fixed else {}), tuning.recording() as log:
            layer = qgemv.IntegerLinear.qb4w(packed, scales, block, n, k, None)
        layouts[fixed] = layer.weights[0].shape[0]
        y = np.empty((1, n), np.float32)
        for step in layer.steps(xc, xscale, y, -np.inf, np.inf):
            step()
        outputs.append(y)
    assert layouts["split"] == 2 and layouts["one-tile"] == 1
    [(_, measured)] = [entry for entry in log if entry[1].family == "qb4w-tiles"]
    assert set(measured.times) == {"split", "one-tile"}  # timed on this host, the winner laid out
    assert layouts[None] == (2 if measured.kernel == "split" else 1)
    for y in outputs[1:]:
        np.testing.assert_array_equal(y, outputs[0])


def test_a_delegates_depthwise_choice_names_its_node(cache):
    """``edgetorch inspect --kernels`` names the XNNPACK node a depthwise convolution's kernel was chosen for."""
    if not policy.compiled_tier():
        pytest.skip("the depthwise kernels' choice needs the [fast] tier")
    import re

    import torch

    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower
    from edgetorch.runtime import Runtime

    conv = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16).eval()
    ep = torch.export.export(conv, (torch.randn(1, 16, 12, 12),))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    with policy.using(kernel_choices={"depthwise": "rows"}), tuning.recording() as log:
        Runtime.get().load_program(pte).load_method("forward")
    found = [w for w, d in log if d.family == "depthwise"]
    assert found and all(re.fullmatch(r"depthwise convolution, node \d+", w) for w in found), found
