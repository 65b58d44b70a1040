"""The int8-dot ("VNNI") QB4W GEMM and GEMV (edgetorch/backends/xnnpack/qgemv_vnni.py) against the QB4W node's
float32 arithmetic in its written order, bit for bit, and against the integer GEMV of qgemv.py on the same layer;
random shapes that are not multiples of their tiles, the extreme inputs and weights; the GEMV as IntegerLinear's
tuning candidate. The kernels run in each dot form the host has (AVX512-VNNI's ``vpdpbusd``, AVX2's ``vpmaddubsw``
then ``vpmaddwd``); skipped on a host with neither. Each form's IR is checked to lower to its instructions on
any x86 host."""

from __future__ import annotations

import re

import numpy as np
import pytest

from edgetorch.backends.xnnpack import qgemv, qgemv_vnni
from edgetorch.errors import InvalidInputError
from edgetorch.runtime import policy, tuning
from edgetorch.runtime.host import host
from edgetorch.runtime.kernels import llvm_jit
from tests.backends.xnnpack.test_qgemv import _pack, _qb4w_float32

needs_dot = pytest.mark.skipif(
    not qgemv_vnni.available(), reason="the host has neither AVX512-VNNI nor AVX2 (or no llvmlite)"
)
# every dot form the host runs (a host with AVX512-VNNI runs the AVX2 form too)
each_form = pytest.mark.parametrize(
    "form",
    qgemv_vnni.dots() or [pytest.param(None, marks=pytest.mark.skip(reason="no dot form on this host"))],
    ids=lambda d: d.flag if d else "none",
)


def _layer(rng, m, k, n, block):
    q = rng.integers(-128, 128, (m, k))
    zp = rng.integers(-128, 128, (m, 1))
    q[0, : k // 2], zp[0] = 127, -128  # centred +255 ...
    if m > 1:
        q[1], zp[1] = -128, 127  # ... and -255 on the -8 weights below
    xc = (q - zp).astype(np.float32)
    w = rng.integers(-8, 8, (n, k)).astype(np.int8)
    w[: n // 2 + 1 : 2] = -8
    w[1::3, ::2] = 7
    scales = (rng.uniform(0.001, 0.02, (n, k // block)) * rng.choice([-1, 1], (n, k // block))).astype(np.float32)
    return xc, zp, w, scales


@each_form
@pytest.mark.parametrize("seed", range(8))
def test_totals_round_bit_for_bit(seed, form):
    rng = np.random.default_rng(seed)
    block = int(rng.choice([8, 16, 32, 64, 128]))
    m, k, n = int(rng.integers(1, 40)), block * int(rng.integers(1, 6)), int(rng.integers(1, 100))
    xc, zp, w, scales = _layer(rng, m, k, n, block)
    got = qgemv_vnni.VnniQB4W(_pack(w), scales, block, n, k, form).totals(xc, zp)
    ones = np.ones((m, 1), np.float32)
    want = _qb4w_float32(xc, w, scales, block, ones, None, -np.inf, np.inf)
    np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_equals_the_integer_gemv(set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    rng = np.random.default_rng(7)
    m, k, n, block = 9, 192, 70, 32
    xc, zp, w, scales = _layer(rng, m, k, n, block)
    xscale = rng.uniform(0.001, 0.05, (m, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    layer = qgemv.IntegerLinear.qb4w(_pack(w), scales, block, n, k, bias)
    y = np.full((m, n), np.nan, np.float32)
    for step in layer.steps(xc, xscale, y, -np.inf, np.inf):
        step()
    got = qgemv_vnni.VnniQB4W(_pack(w), scales, block, n, k).totals(xc, zp) * xscale + bias
    np.testing.assert_array_equal(got.view(np.int32), y.view(np.int32))


def test_rejects_layouts_it_does_not_take():
    with pytest.raises(InvalidInputError, match="multiples of 8"):
        qgemv_vnni.VnniQB4W(np.zeros((4, 6), np.uint8), np.ones((4, 3), np.float32), 4, 4, 12)


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_program_on_the_vnni_path_equals_the_gemv_path(monkeypatch, set_policy):
    """An 8da4w program with its 8 input rows on the VNNI GEMM (tuning's choice fixed) gives the GEMV's values."""

    def settings(name: str) -> dict:
        rows = dict.fromkeys(policy.current().gemv_max_rows, 8 if name == "gemv" else 1)
        return {"gemv_max_rows": rows, "kernel_choices": {"qgemv": name, "qb4w-vnni": name}}

    results = _program_on_each_path(
        monkeypatch, set_policy, qgemv.IntegerLinear, "vnni_steps", ("vnni", "gemv"), settings
    )
    np.testing.assert_array_equal(results["vnni"], results["gemv"])


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_row_counts_in_one_bucket_share_the_decision_and_the_scratch(set_policy):
    """An 8da4w program of dynamic rows on the VNNI GEMM, run at row counts of one tuning bucket in turn, gives every
    call the bits a freshly loaded program gives; its GEMM's working buffers lie in the delegates' shared scratch
    (not a copy a schedule), and each layer holds one decision for the bucket."""
    import torch
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, PerGroup, quantize_

    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.backends.xnnpack.runtime.memory import SCRATCH
    from edgetorch.exir import to_edge_transform_and_lower
    from edgetorch.runtime import Runtime

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU(), torch.nn.Linear(96, 32)).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    rows = torch.export.Dim("rows", min=1, max=64)
    ep = torch.export.export(model, (torch.randn(24, 64),), dynamic_shapes=({0: rows},))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    set_policy(
        tune=True,
        gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 1),
        kernel_choices={"qgemv": "vnni", "qb4w-vnni": "vnni"},
    )
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((m, 64)).astype(np.float32) for m in (20, 27, 20, 31)]  # one bucket: 17 to 32 rows
    fresh = [Runtime.get().load_program(pte).load_method("forward").execute([x])[0] for x in inputs]
    method = Runtime.get().load_program(pte).load_method("forward")
    with tuning.recording() as log:
        for x, want in zip(inputs, fresh):
            np.testing.assert_array_equal(method.execute([x])[0], want)
    assert [decision.family for _, decision in log] == ["qgemv"] * 2  # a layer asks once for the bucket
    (delegate,) = [handle for _, handle in method._executor.delegates]
    calls = [
        step.__self__
        for schedule in delegate.schedules.values()
        for step in schedule.steps
        if isinstance(getattr(step, "__self__", None), qgemv_vnni.GemmCall)
    ]
    assert len(calls) == 2 * 4  # two layers, at 64 rows (the bound, at load), 20, 27 and 31
    assert all(any(np.shares_memory(c.out, chunk) for chunk in SCRATCH) for c in calls)


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
@pytest.mark.parametrize(
    ("tune", "rows", "buckets"), [(True, (65, 128, 1000), ["128"]), (False, (3, 4, 100, 1000), ["4", "128"])]
)
def test_the_gemm_decision_above_the_tuned_rows_is_asked_once_a_bucket(tune, rows, buckets, set_policy):
    """Past the rows tuned one by one (64 by default), or with tuning off, one ``qb4w-vnni`` decision serves a
    power-of-two bucket of row counts (the last, 128, all above): the layer answers later lengths itself."""
    rng = np.random.default_rng(4)
    _, _, w, scales = _layer(rng, 1, 64, 40, 32)
    set_policy(tune=tune, gemv_tuned_rows=64, kernel_choices={"qb4w-vnni": "vnni"})
    layer = qgemv.IntegerLinear.qb4w(_pack(w), scales, 32, 40, 64, None)
    with tuning.recording() as log:
        assert all(layer.uses_vnni(m) for m in rows)
    assert [decision.key.split(":")[1] for _, decision in log] == buckets


def _program_on_each_path(
    monkeypatch, set_policy, owner: type, method: str, names: tuple, settings, scheme: str = "8da4w"
) -> dict:
    """The output of the MLP program quantized by ``scheme`` for each path name, run under the policy
    ``settings(name)``; checks that ``owner.method`` (the kernel of the first path) runs on the first path and on
    no other."""
    from edgetorch.runtime import Runtime
    from tests.backends.xnnpack.test_qgemv import _edgetorch_written

    args, _, pte = _edgetorch_written("mlp", scheme)
    inputs = [a.numpy() for a in args]
    calls: list[int] = []
    original = getattr(owner, method)
    monkeypatch.setattr(owner, method, lambda self, *a: calls.append(1) or original(self, *a))
    results = {}
    for name in names:
        set_policy(**settings(name))
        calls.clear()
        results[name] = Runtime.get().load_program(pte).load_method("forward").execute(inputs)[0]
        assert bool(calls) == (name == names[0])
    return results


def _gemv_case(rng, m, k, n, block, bf16=False):
    """A layer and an input for the GEMV: ``_layer``'s extremes, plus a row of one repeated value (the offset
    then maps every input to byte 0) and weights of a block all -8 or all 7 (the channel sums' extremes); with
    ``bf16`` scales that are bfloat16 values (the GEMV then stores 16 bits of each)."""
    xc, _, w, scales = _layer(rng, m, k, n, block)
    if bf16:
        scales = (scales.view(np.uint32) & 0xFFFF0000).view(np.float32)
    if m > 2:
        xc[2] = -255 if m % 2 else 255
    w[-1, :block] = 7
    xscale = rng.uniform(0.001, 0.05, (m, 1)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    return xc, w, scales, xscale, bias


def _gemv(layer, xc, xscale, bias, lo, hi):
    y = np.full((xc.shape[0], layer.n), np.nan, np.float32)
    layer.step(xc, xscale, np.zeros(0, np.float32) if bias is None else bias, y, lo, hi)()
    return y


@each_form
@pytest.mark.parametrize(("n", "k"), [(960, 576), (576, 576), (1536, 576), (576, 1536)])
@pytest.mark.parametrize("bf16", [True, False])
def test_gemv_bit_for_bit_on_smollm2_shapes(n, k, bf16, form):
    """SmolLM2-135M's decode GEMVs (block 32), one row, with and without bias and clamps, bfloat16 scales (as
    its programs have) or not."""
    rng = np.random.default_rng(n + k)
    xc, w, scales, xscale, bias = _gemv_case(rng, 1, k, n, 32, bf16)
    layer = qgemv_vnni.VnniGemvQB4W(_pack(w), scales, 32, n, k, form)
    assert layer.bf16 == bf16
    for b, lo, hi in ((bias, -np.inf, np.inf), (None, -np.inf, np.inf), (bias, -0.5, 0.25)):
        want = _qb4w_float32(xc, w, scales, 32, xscale, b, lo, hi)
        np.testing.assert_array_equal(_gemv(layer, xc, xscale, b, lo, hi).view(np.int32), want.view(np.int32))


@each_form
@pytest.mark.parametrize("seed", range(10))
def test_gemv_bit_for_bit_on_edge_shapes(seed, form):
    """N off the tile (1 to 200), K of one block to five, blocks of 8 to 4096 inputs (AVX2's largest: its int16
    sums of a block's nibbles then reach 30720 on the weights of 7), 1 to 4 rows read from a wider array (a row
    stride that is not K)."""
    rng = np.random.default_rng(100 + seed)
    block = int(rng.choice([8, 16, 32, 64, 256])) if seed else 4096
    m, k, n = int(rng.integers(1, 5)), block * int(rng.integers(1, 6) if seed else 1), int(rng.integers(1, 200))
    xc, w, scales, xscale, bias = _gemv_case(rng, m, k, n, block, bf16=seed % 2 == 0)
    wide = np.zeros((m, k + 24), np.float32)
    wide[:, 8 : 8 + k] = xc
    layer = qgemv_vnni.VnniGemvQB4W(_pack(w), scales, block, n, k, form)
    for b in (bias, None):
        want = _qb4w_float32(xc, w, scales, block, xscale, b, -np.inf, np.inf)
        got = _gemv(layer, wide[:, 8 : 8 + k], xscale, b, -np.inf, np.inf)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
@pytest.mark.parametrize(("m", "k", "n", "block"), [(1, 576, 576, 32), (1, 64, 70, 64), (3, 192, 130, 32)])
def test_gemv_equals_the_integer_gemv(m, k, n, block, set_policy):
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    rng = np.random.default_rng(m + k + n)
    xc, w, scales, xscale, bias = _gemv_case(rng, m, k, n, block)
    layer = qgemv.IntegerLinear.qb4w(_pack(w), scales, block, n, k, bias)
    y = np.full((m, n), np.nan, np.float32)
    for step in layer.steps(xc, xscale, y, -1.0, 1.0):
        step()
    got = _gemv(layer.vnni_gemv_layer(), xc, xscale, bias, -1.0, 1.0)
    np.testing.assert_array_equal(got.view(np.int32), y.view(np.int32))


def test_gemv_rejects_what_it_does_not_take():
    with pytest.raises(InvalidInputError, match="multiples of 8"):
        qgemv_vnni.VnniGemvQB4W(np.zeros((4, 6), np.uint8), np.ones((4, 3), np.float32), 4, 4, 12)
    if not qgemv_vnni.available():
        return
    layer = qgemv_vnni.VnniGemvQB4W(np.zeros((4, 16), np.uint8), np.ones((4, 1), np.float32), 32, 4, 32)
    xscale, y = np.ones((1, 1), np.float32), np.empty((1, 4), np.float32)
    for xc in (np.zeros((1, 32), np.float64), np.zeros((1, 64), np.float32)[:, ::2], np.zeros((1, 16), np.float32)):
        with pytest.raises(InvalidInputError, match="contiguous rows"):
            layer.step(xc, xscale, np.zeros(0, np.float32), y, -np.inf, np.inf)


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_tuning_measures_the_gemv_and_steps_follow_its_choice(tuned, set_policy):
    """The host times ``vnni-gemv`` beside the integer GEMV for a row (not for more than GEMV_ROWS rows); the
    steps are the VNNI GEMV's exactly when it is chosen, with the same values, and its layout is kept only then."""
    n, k = 70, 128
    rng = np.random.default_rng(3)
    xc, w, scales, xscale, bias = _gemv_case(rng, 1, k, n, 32)
    set_policy(tune=True, kernel_choices={}, gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 16))
    layer = qgemv.IntegerLinear.qb4w(_pack(w), scales, 32, n, k, bias)
    with tuning.recording() as log:
        layer.uses_gemv(1, "here")
        layer.uses_gemv(qgemv_vnni.GEMV_ROWS + 1, "there")
    assert "vnni-gemv" in log[0][1].times and "vnni-gemv" not in log[1][1].times
    _steps_follow_the_choice(set_policy, layer, xc, xscale, qgemv_vnni.gemv_kernel(False))


def _steps_follow_the_choice(set_policy, layer, xc, xscale, kernel) -> None:
    """With tuning's choice fixed to each of ``vnni-gemv`` and ``gemv``, ``layer``'s steps for one row are the
    VNNI ``kernel``'s exactly when it is chosen, its layout kept only then (and the integer GEMV's QB4W layout only
    when that is chosen), and both give the same bits."""
    values = {}
    for choice in ("vnni-gemv", "gemv"):
        set_policy(kernel_choices={"qgemv": choice})
        layer.chosen.clear()
        assert layer.uses_gemv(1)
        y = np.full((1, layer.n), np.nan, np.float32)
        steps = layer.steps(xc, xscale, y, -np.inf, np.inf)
        assert (steps[0].func is kernel) == (choice == "vnni-gemv")
        assert (layer.vnni_gemv is not None) == (choice == "vnni-gemv")  # its copy of the weights only if run
        if layer.source is not None:  # QB4W: the integer GEMV's layout dropped while no decision runs it, then remade
            assert (layer._weights is None) == (choice == "vnni-gemv")
        for step in steps:
            step()
        values[choice] = y
    np.testing.assert_array_equal(values["vnni-gemv"].view(np.int32), values["gemv"].view(np.int32))


@needs_dot
@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_program_on_the_vnni_gemv_equals_the_gemv_path(tuned, monkeypatch, set_policy):
    """An 8da4w program (8 input rows, the integer GEMV's limit raised to them) with its 4-bit layers on the VNNI GEMV,
    tuning's choice fixed, gives the integer GEMV's values bit for bit."""

    def settings(name: str) -> dict:
        rows = dict.fromkeys(policy.current().gemv_max_rows, 8)
        return {"tune": True, "kernel_choices": {"qgemv": name}, "gemv_max_rows": rows}

    names = ("vnni-gemv", "gemv")
    results = _program_on_each_path(monkeypatch, set_policy, qgemv_vnni.VnniGemvQB4W, "step", names, settings)
    np.testing.assert_array_equal(results["vnni-gemv"].view(np.int32), results["gemv"].view(np.int32))


def test_forms_follow_the_cpu_flags():
    """VNNI first where the CPU has it, AVX2 on its own, nothing on a CPU with neither; the host's forms are its
    flags' (with llvmlite)."""
    vnni, avx2 = qgemv_vnni.VNNI, qgemv_vnni.AVX2
    assert qgemv_vnni.forms(frozenset({"avx2", "avx512f", "avx512_vnni"})) == (vnni, avx2)
    assert qgemv_vnni.forms(frozenset({"avx", "avx2", "fma"})) == (avx2,)
    assert qgemv_vnni.forms(frozenset({"sse4_2", "avx", "asimddp"})) == ()
    assert qgemv_vnni.dots() == (qgemv_vnni.forms(host().flags) if llvm_jit.usable() else ())


@pytest.mark.skipif(host().machine != "x86_64" or not llvm_jit.usable(), reason="needs x86 code generation (llvmlite)")
@pytest.mark.parametrize(
    ("form", "cpu", "wanted", "unwanted"),
    [
        (qgemv_vnni.VNNI, "icelake-server", {"vpdpbusd"}, ("vpmaddubsw", "vpmaddwd")),
        (qgemv_vnni.AVX2, "znver3", {"vpmaddubsw", "vpmaddwd"}, ("vpdpbusd", "zmm")),
    ],
    ids=["avx512_vnni", "avx2"],
)
@pytest.mark.parametrize("kernel", ["gemm", "gemv"])
def test_each_form_lowers_to_its_instructions(form, cpu, wanted, unwanted, kernel):
    """On any x86 host: the GEMM's and the GEMV's IR in each dot form, compiled for a CPU that has it, multiply
    with the form's instructions and not the other's (the AVX2 form on 256-bit registers only); the GEMV
    prefetches its weights where its form says so."""
    ir = qgemv_vnni._ir(form) if kernel == "gemm" else qgemv_vnni._gemv_ir(form, bf16=True)
    text = llvm_jit.jit(ir, cpu=cpu)[1]
    assert text is not None
    words = set(re.findall(r"^\s+(\w+)", text, re.MULTILINE))
    assert wanted <= words
    assert not [word for word in unwanted if word in text]
    assert ("prefetcht0" in words) == (kernel == "gemv" and form.ahead > 0)  # the GEMV's stream, ahead of use


def test_avx2_gemv_takes_blocks_up_to_its_int16_sums():
    """The AVX2 GEMV sums a block's nibbles in int16 lanes: it refuses blocks past 4096 inputs, which the VNNI
    form's layout takes (a layout is made on any host; only its call needs the instructions)."""
    packed, scales = np.zeros((4, 4096), np.uint8), np.ones((4, 1), np.float32)
    with pytest.raises(InvalidInputError, match="blocks of up to 4096"):
        qgemv_vnni.VnniGemvQB4W(packed, scales, 8192, 4, 8192, qgemv_vnni.AVX2)
    assert qgemv_vnni.VnniGemvQB4W(packed, scales, 8192, 4, 8192, qgemv_vnni.VNNI).npad == 64


@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
@pytest.mark.parametrize("form", [qgemv_vnni.VNNI, qgemv_vnni.AVX2], ids=["avx512_vnni", "avx2"])
def test_layers_offer_the_gemv_for_the_blocks_the_form_takes(form, monkeypatch):
    """IntegerLinear offers the GEMV of the host's form only for blocks that form takes (decided without
    compiling: runs on any host)."""
    monkeypatch.setattr(qgemv_vnni, "dot", lambda: form)
    for block, offered in ((4096, True), (8192, form is qgemv_vnni.VNNI)):
        packed, scales = np.zeros((4, block), np.uint8), np.ones((4, 2), np.float32)
        layer = qgemv.IntegerLinear.qb4w(packed, scales, block, 4, 2 * block, None)
        assert layer._takes_vnni() and layer._takes_vnni_gemv() == offered
