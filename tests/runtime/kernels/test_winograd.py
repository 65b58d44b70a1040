"""Winograd's F(2x2, 3x3) convolution of the [fast] tier (edgetorch/runtime/kernels/winograd.py): within
float32 rounding of a float64 convolution on every edge case of its tiles, the same bits on one thread or
two, and declined where it does not apply."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import winograd

needs_tier = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _conv64(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, pad: tuple[int, int, int, int]) -> np.ndarray:
    """The float64 convolution of NHWC ``x`` by ``w`` [OC, 3, 3, C], padded (top, bottom, left, right)."""
    top, bottom, left, right = pad
    xt = torch.nn.functional.pad(torch.from_numpy(x).double().permute(0, 3, 1, 2), (left, right, top, bottom))
    wt = torch.from_numpy(w).double().permute(0, 3, 1, 2)
    b = None if bias is None else torch.from_numpy(bias).double()
    return torch.nn.functional.conv2d(xt, wt, b).permute(0, 2, 3, 1).numpy()


def _run(x, w, bias, pad, lo=-np.inf, hi=np.inf):
    top, bottom, left, right = pad
    nb, h, wd, _ = x.shape
    y = np.full((nb, h + top + bottom - 2, wd + left + right - 2, w.shape[0]), np.nan, np.float32)
    step = winograd.step(x, winograd.prepare(w), bias, y, top, left, lo, hi)
    assert step is not None
    step()
    return y


def _case(nb, h, wd, c, oc, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((nb, h, wd, c), dtype=np.float32)
    w = rng.standard_normal((oc, 3, 3, c), dtype=np.float32)
    return x, w, rng.standard_normal(oc, dtype=np.float32)


@needs_tier
@pytest.mark.parametrize(
    ("nb", "h", "wd", "c", "oc", "pad"),
    [(1, 8, 8, 8, 16, (1, 1, 1, 1)), (2, 7, 9, 16, 24, (1, 1, 1, 1)), (1, 6, 5, 8, 8, (0, 0, 0, 0)),
     (1, 9, 6, 24, 40, (2, 2, 2, 2)), (3, 3, 3, 8, 8, (1, 1, 1, 1)), (1, 10, 4, 32, 16, (2, 0, 1, 0))],
)  # fmt: skip
def test_matches_a_float64_convolution_on_every_tile_edge(nb, h, wd, c, oc, pad):
    """Odd sizes (a last tile half outside the output), tiles over the padding on every side, uneven padding,
    output channels that end inside a panel: each output within float32 rounding of the exact sum."""
    x, w, b = _case(nb, h, wd, c, oc)
    y = _run(x, w, b, pad)
    want = _conv64(x, w, b, pad)
    assert y.shape == want.shape and not np.isnan(y).any()
    scale = _conv64(np.abs(x), np.abs(w), np.abs(b), pad)  # the sum of the magnitudes each output adds up
    assert np.all(np.abs(y - want) <= 64 * np.finfo(np.float32).eps * scale)


@needs_tier
def test_no_bias_and_a_clamp():
    x, w, _ = _case(1, 12, 12, 8, 16, seed=1)
    y = _run(x, w, None, (1, 1, 1, 1), lo=0.0, hi=6.0)
    want = np.clip(_conv64(x, w, None, (1, 1, 1, 1)), 0.0, 6.0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-4)
    assert y.min() == 0.0 and y.max() == 6.0


@needs_tier
def test_blocks_split_over_threads_give_the_bits_of_one(monkeypatch, set_policy, kernel_threads):
    set_policy(winograd_block_bytes=1)  # one GEMM tile (6 output tiles) a block: many blocks
    set_policy(split_macs=1)
    x, w, b = _case(2, 13, 11, 16, 24, seed=2)
    kernel_threads(2)
    split = _run(x, w, b, (1, 1, 1, 1))
    kernel_threads(1)
    serial = _run(x, w, b, (1, 1, 1, 1))
    np.testing.assert_array_equal(split, serial)
    np.testing.assert_allclose(split, _conv64(x, w, b, (1, 1, 1, 1)), rtol=1e-4, atol=1e-4)


@needs_tier
def test_output_panels_split_over_threads_give_the_bits_of_one(monkeypatch, set_policy, kernel_threads):
    """With more transformed weights than transformed inputs, each thread takes a run of output channels and
    transforms every tile's input itself."""
    set_policy(split_macs=1)
    x, w, b = _case(1, 5, 7, 16, 56, seed=3)  # 12 tiles, 4 panels (the last one half full)
    kernel_threads(2)
    split = _run(x, w, b, (1, 1, 1, 1), lo=-2.0, hi=3.0)
    kernel_threads(1)
    serial = _run(x, w, b, (1, 1, 1, 1), lo=-2.0, hi=3.0)
    np.testing.assert_array_equal(split, serial)
    want = np.clip(_conv64(x, w, b, (1, 1, 1, 1)), -2.0, 3.0)
    np.testing.assert_allclose(split, want, rtol=1e-4, atol=1e-4)


def test_eligible_shapes_and_enough_tiles(set_policy):
    assert winograd.eligible(3, 3, 1, 1, 1, 1, 1, 64, 64)
    assert not winograd.eligible(3, 3, 2, 2, 1, 1, 1, 64, 64)  # stride 2
    assert not winograd.eligible(3, 3, 1, 1, 2, 2, 1, 64, 64)  # dilated
    assert not winograd.eligible(5, 5, 1, 1, 1, 1, 1, 64, 64)
    assert not winograd.eligible(3, 3, 1, 1, 1, 1, 2, 64, 64)  # grouped
    assert not winograd.eligible(3, 3, 1, 1, 1, 1, 1, 3, 64)  # an image's 3 channels: not in vectors of 8
    assert winograd.worth(1, 7, 7) and winograd.worth(2, 6, 6)  # ResNet-18's last stage: 16 tiles
    assert not winograd.worth(1, 6, 6)
    set_policy(winograd_min_tiles=9)  # the threshold is the policy's
    assert winograd.worth(1, 6, 6) and not winograd.worth(1, 5, 4)


@needs_tier
def test_declines_arrays_it_cannot_take():
    x, w, b = _case(1, 8, 8, 8, 8)
    wp = winograd.prepare(w)
    y = np.empty((1, 8, 8, 8), np.float32)
    assert winograd.step(x.astype(np.float64), wp, b, y, 1, 1, -np.inf, np.inf) is None
    assert winograd.step(x[:, :, ::-1], wp, b, y, 1, 1, -np.inf, np.inf) is None  # not C-contiguous
    assert winograd.step(x, winograd.prepare(np.zeros((8, 3, 3, 16), np.float32)), b, y, 1, 1, 0, 6) is None
