"""Non-core ATen kernels (index reductions, put, segment_reduce, dist, _trilinear, anti-aliased resize, 3-d grid
sampling) against torch eager."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import call, check

aten = torch.ops.aten


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_reduce(reduce, include_self, dtype):
    x = (_r(5, 3) * 4).to(dtype)
    source = (_r(4, 3, seed=1) * 4).to(dtype)
    index = torch.tensor([0, 4, 0, 2])
    want = aten.index_reduce(x, 0, index, source, reduce, include_self=include_self)
    check(call("aten::index_reduce.out", x, 0, index, source, reduce, include_self, out_like=want), want)


def test_index_reduce_zero_dim_self():
    x, source, index = torch.tensor(3.0), torch.tensor(5.0), torch.tensor([0])
    want = aten.index_reduce(x, 0, index, source, "mean")
    check(call("aten::index_reduce.out", x, 0, index, source, "mean", True, out_like=want), want)


@pytest.mark.parametrize("accumulate", [True, False])
def test_put(accumulate):
    x, index, source = _r(3, 4), torch.tensor([[1, -1], [5, 1]]), _r(2, 2, seed=1)
    if not accumulate:
        index = torch.tensor([[1, -1], [5, 0]])  # repeated indices without accumulate keep an unspecified one
    want = aten.put(x, index, source, accumulate)
    check(call("aten::put.out", x, index, source, accumulate, out_like=want), want)


@pytest.mark.parametrize("reduce", ["max", "min", "sum", "mean", "prod"])
@pytest.mark.parametrize("initial", [None, 2.0])
def test_segment_reduce(reduce, initial):
    data, lengths = _r(2, 6, 3), torch.tensor([[2, 0, 4], [1, 3, 2]])
    data[0, 1, 1] = math.nan
    kwargs = dict(lengths=lengths, axis=1, initial=initial)
    want = aten.segment_reduce(data, reduce, **kwargs)
    got = call("aten::segment_reduce.out", data, reduce, lengths, None, None, 1, False, initial, out_like=want)
    torch.testing.assert_close(torch.from_numpy(got), want, equal_nan=True)
    offsets = torch.cat([torch.zeros(2, 1, dtype=torch.int64), lengths.cumsum(-1)], -1)
    got = call("aten::segment_reduce.out", data, reduce, None, None, offsets, 1, False, initial, out_like=want)
    torch.testing.assert_close(torch.from_numpy(got), want, equal_nan=True)


@pytest.mark.parametrize("p", [2.0, 1.0, 0.0, 3.5, math.inf, -math.inf])
def test_dist(p):
    a, b = _r(3, 4), _r(4, seed=1)
    want = aten.dist(a, b, p)
    check(call("aten::dist.out", a, b, p, out_like=want), want)


def test_trilinear_is_bilinear():
    x1, x2, w = _r(5, 3), _r(5, 4, seed=1), _r(2, 3, 4, seed=2)
    want = aten._trilinear(x1, w, x2, [1, 3], [0], [1, 2], [2, 3])
    check(call("aten::_trilinear.out", x1, w, x2, [1, 3], [0], [1, 2], [2, 3], 1, out_like=want), want)


@pytest.mark.parametrize(
    ("size", "align_corners", "scales"),
    [([3, 5], False, (None, None)), ([9, 4], True, (None, None)), ([2, 12], False, (0.3, 2.0))],
)
def test_upsample_bilinear2d_aa(size, align_corners, scales):
    x = _r(2, 3, 7, 6)
    want = aten._upsample_bilinear2d_aa(x, size, align_corners, *scales)
    check(call("aten::_upsample_bilinear2d_aa.out", x, size, align_corners, *scales, out_like=want), want)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("padding_mode", [0, 1, 2])
@pytest.mark.parametrize("align_corners", [True, False])
def test_grid_sampler_3d(mode, padding_mode, align_corners):
    x, grid = _r(2, 3, 4, 5, 6), _r(2, 3, 2, 4, 3, seed=1) * 1.2
    want = aten.grid_sampler_3d(x, grid, mode, padding_mode, align_corners)
    got = call("aten::grid_sampler_3d.out", x, grid, mode, padding_mode, align_corners, out_like=want)
    check(got, want)


def test_empty_permuted_shape():
    like = torch.empty(2, 3, 4)
    assert call("aten::empty_permuted.out", [2, 3, 4], [0, 2, 1], out_like=like).shape == (2, 3, 4)


def test_angle_of_reals():
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, math.nan, -math.inf])
    want = torch.angle(x)
    check(call("aten::angle.out", x, out_like=want), want)


@pytest.mark.parametrize(("dim", "keepdim"), [([], False), ([1], True), ([0], False)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_hash_tensor(dim, keepdim, dtype):
    x = (_r(3, 4) * 100).to(dtype)
    want = aten.hash_tensor(x, dim, keepdim=keepdim)
    got = call("aten::hash_tensor.out", x, dim, keepdim, 0, out_like=want)
    assert got.shape == tuple(want.shape) and got.tolist() == want.view(torch.int64).numpy().view("u8").tolist()


def test_resize_keeps_elements_in_order():
    x = _r(2, 6)
    want = aten.resize(x.clone(), [3, 4])
    check(call("aten::resize.out", x, [3, 4], None, out_like=want), want)


@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_histogramdd(density, weighted):
    x, w = _r(20, 3), torch.rand(20, generator=torch.Generator().manual_seed(3))
    weight = w if weighted else None
    want = aten._histogramdd_from_bin_cts(x, [3, 4, 2], range=None, weight=weight, density=density)
    check(call("aten::_histogramdd_from_bin_cts.out", x, [3, 4, 2], None, weight, density, out_like=want), want)
    edges = aten._histogramdd_bin_edges(x, [3, 4, 2], range=[-1.0, 1.0, -2.0, 0.0, 0.0, 3.0])
    fn, _ = KERNELS["aten::_histogramdd_bin_edges.out"]
    got = fn(
        x.numpy(), [3, 4, 2], [-1.0, 1.0, -2.0, 0.0, 0.0, 3.0], None, False, [np.empty(5, np.float32) for _ in range(3)]
    )
    for g, e in zip(got, edges):
        check(g, e)
    want = aten._histogramdd_from_bin_tensors(x, list(edges), weight=weight, density=density)
    check(
        call("aten::_histogramdd_from_bin_tensors.out", x, [e.numpy() for e in edges], weight, density, out_like=want),
        want,
    )
