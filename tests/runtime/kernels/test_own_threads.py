"""compiled.own_threads: the one rule, read off the steps, for when BLAS keeps to one thread."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled, gemm

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _in_turn(first, then):
    first()
    then()


@needs_numba
def test_packed_gemm_and_split_steps_claim_the_cores_and_plain_numpy_does_not(set_policy):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8), dtype=np.float32), rng.standard_normal((8, 16), dtype=np.float32)
    y = np.empty((4, 16), np.float32)
    sgemm = partial(np.matmul, x, w, out=y)
    set_policy(split_macs=1 << 40)
    serial = gemm.PackedGemm(w, None).step(x, y)
    assert not compiled.splits(serial)
    assert compiled.own_threads([sgemm, serial])  # the GEMM family claims the cores even on one thread
    assert compiled.own_threads([partial(_in_turn, sgemm, serial)])  # looked into
    assert not compiled.own_threads([sgemm, partial(np.add, y, 1, out=y)])
    set_policy(split_elements=1)
    rows = compiled.rows_step("gelu", y, y.copy())
    assert compiled.splits(rows) and compiled.own_threads([rows])
