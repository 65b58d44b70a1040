"""The convolution as im2col and the packed GEMM in one pass (edgetorch/runtime/kernels/im2col_gemm.py): the same
bits as the two-step form (the whole im2col buffer, then the packed GEMM) on every window it takes, from an input
at any strides, on one thread or two; declined where it does not apply."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, gemm, im2col_gemm, windows

needs_tier = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _layer(nb, h, wd, c, oc, kh, kw, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((nb, h, wd, c), dtype=np.float32)
    w = rng.standard_normal((kh * kw * c, oc), dtype=np.float32)
    return x, gemm.PackedGemm(w, rng.standard_normal(oc, dtype=np.float32), -1.5, 2.0)


def _two_steps(packed, x, window, kernel):
    """The two-step form the delegate ran before: every window's columns, then the packed GEMM."""
    oh, ow, kh, kw, sh, sw, dh, dw, top, left = window
    cols = np.empty((x.shape[0] * oh * ow, kh * kw * x.shape[3]), np.float32)
    y = np.empty((cols.shape[0], packed.n), np.float32)
    windows.im2col_step(np.ascontiguousarray(x), cols, oh, ow, kh, kw, sh, sw, dh, dw, top, left)()
    packed.step(cols, y, kernel)()
    return y


def _window(h, wd, kh, kw, sh, sw, dh, dw, pad):
    top, bottom, left, right = pad
    oh = (h + top + bottom - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + left + right - dw * (kw - 1) - 1) // sw + 1
    return (oh, ow, kh, kw, sh, sw, dh, dw, top, left)


CASES = [
    # nb, h, wd, c, oc, kh, kw, sh, sw, dh, dw, pad (top, bottom, left, right)
    (1, 224, 224, 3, 32, 3, 3, 2, 2, 1, 1, (1, 1, 1, 1)),  # an image model's first layer
    (2, 15, 17, 3, 64, 7, 7, 2, 2, 1, 1, (3, 3, 3, 3)),  # ResNet's stem, two images, odd sizes
    (1, 12, 9, 8, 24, 3, 3, 1, 1, 2, 2, (2, 2, 2, 2)),  # dilated; output channels end inside a panel
    (1, 10, 11, 5, 16, 3, 2, 1, 2, 1, 1, (0, 1, 1, 0)),  # uneven window and padding
    (1, 9, 9, 16, 40, 2, 2, 2, 2, 1, 1, (0, 0, 0, 0)),  # no padding (TensorFlow's "same" folded elsewhere)
]


@needs_tier
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kernel", gemm.packed_kernels())
def test_the_same_bits_as_columns_then_gemm(case, kernel):
    """Each output is its K products summed in order by the same tiles: equal to the two-step form bit for bit,
    whether it runs as one part or is cut in two (whole tiles a part), and from a channels-first array read
    through its strides (the NCHW input's transposed view) as from a contiguous one."""
    nb, h, wd, c, oc, kh, kw, sh, sw, dh, dw, pad = case
    x, packed = _layer(nb, h, wd, c, oc, kh, kw)
    window = _window(h, wd, kh, kw, sh, sw, dh, dw, pad)
    want = _two_steps(packed, x, window, kernel)
    strided = np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1)
    for source in (x, strided):
        y = np.full_like(want, np.nan)
        with policy.using(split_macs=0):  # a step that may split, whatever the layer's size
            step = im2col_gemm.step(packed, source, y, window, kernel)
        assert step is not None and compiled.splits(step)
        serial, threaded = step.args[:2]
        serial()
        np.testing.assert_array_equal(y, want)
        y[:] = np.nan
        threaded(2)  # two parts whatever the machine's thread count
        np.testing.assert_array_equal(y, want)


@needs_tier
def test_declines_what_it_cannot_take():
    """Weights past one of the GEMM's cache groups keep the two-step form; arrays of the wrong shape or dtype
    are refused (None), not read out of bounds."""
    x, packed = _layer(1, 8, 8, 64, 256, 3, 3)
    assert not im2col_gemm.takes(packed)  # 576 x 256 floats, 576 KB
    x, packed = _layer(1, 8, 8, 3, 32, 3, 3)
    assert im2col_gemm.takes(packed)
    window = _window(8, 8, 3, 3, 1, 1, 1, 1, (1, 1, 1, 1))
    assert im2col_gemm.step(packed, x, np.empty((64, 16), np.float32), window) is None
    assert im2col_gemm.step(packed, x.astype(np.float64), np.empty((64, 32), np.float32), window) is None
    assert im2col_gemm.step(packed, x[..., :2], np.empty((64, 32), np.float32), window) is None
