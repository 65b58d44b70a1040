"""MobileNet's inverted residual block in one pass (edgetorch/runtime/kernels/inverted_residual.py): the same bits
as its three layers run one after the other by the same kernels, for every depthwise kernel, window, stride,
padding and batch, with passes of a few rows (the kept rows moved to the buffer's front) and bands cut for one,
two or three threads, with and without the residual add after it; declined where the arrays do not fit the
layers."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, depthwise, gemm, inverted_residual

needs_tier = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _block(c, e, co, kh, stride, pad, seed=0, bias=True):
    rng = np.random.default_rng(seed)
    expand = gemm.PackedGemm(
        rng.standard_normal((c, e), dtype=np.float32), rng.standard_normal(e, dtype=np.float32), 0, 6
    )
    project = gemm.PackedGemm(
        rng.standard_normal((e, co), dtype=np.float32), rng.standard_normal(co, dtype=np.float32) if bias else None
    )
    taps = rng.standard_normal((kh * kh, e), dtype=np.float32)
    b = rng.standard_normal(e, dtype=np.float32) if bias else np.empty(0, np.float32)
    return expand, taps, b, project


def _layer_by_layer(expand, dw, project, x, oh, ow, kernels):
    """The layers' own steps, one after the other (no expanding layer: the depthwise one reads ``x``)."""
    nb, h, wd, c = x.shape
    e = c if expand is None else expand.n
    ex = x if expand is None else np.empty((nb, h, wd, e), np.float32)
    if expand is not None:
        expand.step(x.reshape(-1, c), ex.reshape(-1, e), kernels[0])()
    mid = np.empty((nb, oh, ow, e), np.float32)
    depthwise._step(dw.kernel, ex, dw.taps, dw.bias, mid, *dw.window, np.float32(dw.lo), np.float32(dw.hi))()
    y = np.empty((nb, oh, ow, project.n), np.float32)
    project.step(mid.reshape(-1, e), y.reshape(-1, project.n), kernels[1])()
    return y


CASES = [
    # nb, h, wd, c, e, co, kernel, stride, padding
    (1, 20, 18, 8, 48, 8, 3, 1, 1),  # a residual block's shape
    (2, 17, 15, 16, 96, 24, 3, 2, 1),  # stride 2, odd sizes, two images
    (1, 13, 11, 24, 72, 40, 5, 2, 2),  # EfficientNet's 5x5
    (1, 9, 12, 8, 40, 16, 5, 1, 2),  # channels that end inside a vector and a panel
    (1, 7, 7, 16, 64, 16, 3, 1, 1),  # a late block's small image
    (1, 10, 10, 8, 32, 8, 3, 1, 0),  # no padding
    (2, 14, 12, 24, 0, 16, 3, 2, 1),  # no expanding layer (MobileNetV2's first block), two images
    (1, 11, 13, 16, 0, 8, 3, 1, 1),
]


@needs_tier
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", depthwise.kernels())
@pytest.mark.parametrize("held", [0, 1 << 19])
def test_the_same_bits_as_layer_by_layer(case, kernel, held, monkeypatch):
    """One pass per row (``held`` 0: the buffer holds one window, so every pass moves the rows it keeps) or
    passes as the module sizes them; one part, and bands for two and three threads: each output equal to the
    three layers' bit for bit."""
    nb, h, wd, c, e, co, kh, stride, pad = case  # e 0: no expanding layer
    monkeypatch.setattr(inverted_residual, "EXPANDED_BYTES", held)
    expand, taps, b, project = _block(c, e or c, co, kh, stride, pad, bias=kernel != "rows")
    expand = expand if e else None
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kh) // stride + 1
    dw = inverted_residual.Depthwise(taps, b, (kh, kh, stride, stride, 1, 1, pad, pad), 0.0, 6.0, kernel)
    kernels = (gemm.packed_kernels()[-1], gemm.packed_kernels()[0])
    x = np.random.default_rng(1).standard_normal((nb, h, wd, c), dtype=np.float32)
    want = _layer_by_layer(expand, dw, project, x, oh, ow, kernels)
    y = np.full((nb, oh, ow, co), np.nan, np.float32)
    with policy.using(split_macs=0):  # a step that may split, whatever the block's size
        step = inverted_residual.step(expand, dw, project, x, y, kernels)
    assert step is not None and compiled.splits(step)
    serial, threaded = step.args[:2]
    serial()
    np.testing.assert_array_equal(y, want)
    for parts in (2, 3):
        y[:] = np.nan
        threaded(parts)
        np.testing.assert_array_equal(y, want)
    if x.shape == y.shape:  # with the residual add after the block: the input added to the projection
        with policy.using(split_macs=0):
            step = inverted_residual.step(expand, dw, project, x, y, kernels, residual=True)
        for parts in (1, 2):
            y[:] = np.nan
            step.args[1](parts)
            np.testing.assert_array_equal(y, x + want)


@needs_tier
def test_declines_arrays_that_do_not_fit_the_layers():
    expand, taps, b, project = _block(8, 32, 8, 3, 1, 1)
    dw = inverted_residual.Depthwise(taps, b, (3, 3, 1, 1, 1, 1, 1, 1), 0.0, 6.0, "rows")
    x = np.zeros((1, 6, 6, 8), np.float32)
    assert inverted_residual.step(expand, dw, project, x, np.empty((1, 6, 6, 8), np.float32)) is not None
    assert inverted_residual.step(expand, dw, project, x[..., :4], np.empty((1, 6, 6, 8), np.float32)) is None
    assert inverted_residual.step(expand, dw, project, x, np.empty((1, 6, 6, 16), np.float32)) is None
    assert inverted_residual.step(expand, dw, project, x, np.empty((2, 6, 6, 8), np.float32)) is None
    assert inverted_residual.step(expand, dw, project, x.astype(np.float64), np.empty((1, 6, 6, 8), np.float32)) is None
    y = np.empty((1, 6, 6, 8), np.float32)
    assert inverted_residual.step(expand, dw, project, x[:, :, :, :8], y, residual=True) is not None
    expand, taps, b, project = _block(8, 32, 16, 3, 1, 1)
    dw = inverted_residual.Depthwise(taps, b, (3, 3, 1, 1, 1, 1, 1, 1), 0.0, 6.0, "rows")
    assert inverted_residual.step(expand, dw, project, x, np.empty((1, 6, 6, 16), np.float32), residual=True) is None


def test_takes_the_blocks_whose_weights_fit_the_cache():
    assert inverted_residual.takes(24, 144, 24) and inverted_residual.takes(96, 576, 96)
    assert not inverted_residual.takes(160, 960, 160)
