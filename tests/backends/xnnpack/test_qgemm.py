"""qgemm: integer matrix products with float32 BLAS, exact by the column L1 bound."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.backends.xnnpack import qgemm


def _run(steps: list) -> None:
    for step in steps:
        step()


@pytest.mark.parametrize(
    ("k", "n", "weights"),
    [
        (1024, 16, "normal"),  # a typical layer: one chunk covers K = 1024
        (2048, 8, "extreme"),  # every weight 127: 2048 * 128 * 127 > 2**24, so several chunks
        (1500, 4, "mixed"),  # one extreme column forces chunks; the others would not need them
    ],
)
def test_chunked_sgemm_equals_the_int64_product(k, n, weights):
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (5, k)).astype(np.float32)
    x[0] = -128  # the largest input magnitude on every term
    if weights == "normal":
        w = np.clip(np.rint(rng.standard_normal((k, n)) * 32), -127, 127)
    else:
        w = np.full((k, n), 127.0)
        if weights == "mixed":
            w[:, 1:] = rng.integers(-3, 4, (k, n - 1))
    w = w.astype(np.float32)
    w[:, 0] = -np.abs(w[:, 0])  # with x = -128 the first column's dot product is its largest bound
    splits = qgemm.exact_splits(w, 128.0)
    assert splits[0] == 0 and splits[-1] == k and all(a < b for a, b in zip(splits, splits[1:]))
    bound = np.abs(w.astype(np.float64)) * 128
    for a, b in zip(splits, splits[1:]):
        assert bound[a:b].sum(axis=0).max() <= qgemm.EXACT
    assert (len(splits) == 2) == (weights == "normal")
    out = np.empty((5, n), np.float32)
    _run(qgemm.matmul_steps(x, w, out, splits))
    want = x.astype(np.int64) @ w.astype(np.int64)
    if weights == "extreme":
        assert np.abs(want).max() > 2**24  # beyond float32's exact integers: the chunks are what keep it exact
        np.testing.assert_array_equal(out.astype(np.int64), want.astype(np.float32).astype(np.int64))
    else:
        np.testing.assert_array_equal(out.astype(np.int64), want)


def test_bias_row_and_ones_column():
    rng = np.random.default_rng(1)
    w = rng.integers(-127, 128, (6, 3)).astype(np.float32)
    bias = np.array([1000, -5, 7], np.int32)
    xa = np.ones((4, 7), np.float32)  # the last column multiplies the bias row
    xa[:, :6] = rng.integers(-128, 128, (4, 6))
    got = xa @ qgemm.with_bias_row(w, bias)
    np.testing.assert_array_equal(got, xa[:, :6] @ w + bias)
    np.testing.assert_array_equal(qgemm.with_bias_row(w, None)[6], 0)
