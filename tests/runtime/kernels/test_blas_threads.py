"""NumPy's BLAS threads where no kernel of a run splits (blas_threads.Adaptive): on one thread when the runtime
may use one, else on its threads or on one, whichever a call site has found faster; a site inside another's body
changes nothing. The thread count is read through threadpoolctl, which finds NumPy's OpenBLAS by itself."""

from __future__ import annotations

import time

import numpy as np
import pytest

from edgetorch.runtime import Runtime, policy
from edgetorch.runtime.kernels import blas_threads

threadpoolctl = pytest.importorskip("threadpoolctl")


def _numpys() -> list[int]:
    found = threadpoolctl.ThreadpoolController().select(internal_api="openblas").lib_controllers
    return [c.num_threads for c in found if "numpy" in c.filepath]


@pytest.fixture
def two_blas_threads():
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        if not _numpys():
            pytest.skip("NumPy's BLAS here is not OpenBLAS")
        yield


def test_one_runtime_thread_holds_blas_to_one(two_blas_threads):
    with policy.using(threads=1):
        with blas_threads.held(False, blas_threads.Adaptive()):
            assert _numpys() == [1]
        with blas_threads.held(False):
            assert _numpys() == [1]
    assert _numpys() == [2]


class _Unbounded(policy.TrialBudget):
    """Trials of the losing variant never wait for the time they lost to be paid back."""

    BURST_NS = 10**15


def test_a_site_whose_threads_wait_runs_blas_on_one_thread(two_blas_threads):
    """A body that takes ten times longer with BLAS on two threads (a busy neighbour's effect) is soon run on
    one; one that is faster on two keeps them. The body reads the count through OpenBLAS's own call (a
    microsecond), so that its time is the sleep's."""
    found = blas_threads._lookup()
    if not found:
        pytest.skip("NumPy's OpenBLAS is not found by its C API here")
    count = found[0]
    for slow, parallel in ((2, False), (1, True)):
        site, seen = blas_threads.Adaptive(_Unbounded()), []
        with policy.using(threads=2, split_adapts=True):
            for _ in range(12):
                with blas_threads.held(False, site):
                    seen.append(count())
                    time.sleep(0.004 if seen[-1] == slow else 0.0004)
        assert site.choice.countdown >= 0 and site.choice.parallel is parallel, (seen, site.choice.estimate)
        assert set(seen) == {1, 2}  # both were tried
        assert _numpys() == [2]


def test_an_inner_site_leaves_the_outer_choice(two_blas_threads):
    outer, inner = blas_threads.Adaptive(), blas_threads.Adaptive()
    with policy.using(threads=2, split_adapts=True):
        for _ in range(8):
            with blas_threads.held(False, outer):
                got = _numpys()
                with blas_threads.held(False, inner):
                    assert _numpys() == got
    assert inner.choice.samples == ([], []) and inner.choice.countdown < 0  # never timed
    assert _numpys() == [2]


def test_a_method_run_times_its_site(two_blas_threads):
    torch = pytest.importorskip("torch")
    from edgetorch.exir import to_edge

    class MatMul(torch.nn.Module):
        def forward(self, x, y):
            return x @ y

    args = (torch.randn(64, 64), torch.randn(64, 64))
    program = to_edge(torch.export.export(MatMul(), args)).to_executorch()
    method = Runtime.get().load_program(program.buffer).load_method("forward")
    with policy.using(threads=2, split_adapts=True):
        for _ in range(8):
            out = method.execute([a.numpy() for a in args])[0]
    np.testing.assert_allclose(out, (args[0] @ args[1]).numpy(), rtol=1e-5, atol=1e-4)
    site = method._executor.blas
    assert site.choice.countdown >= 0  # both variants timed and one chosen


def test_a_large_product_inside_a_hold_gets_blas_threads_back(two_blas_threads):
    seen: list[list[int]] = []
    large = blas_threads.widened(lambda: seen.append(_numpys()), blas_threads.WIDE_MACS)
    small = blas_threads.widened(lambda: seen.append(_numpys()), blas_threads.WIDE_MACS - 1)
    with policy.using(threads=2), blas_threads.ONE_THREAD:
        large()
        small()
        assert _numpys() == [1]
    with policy.using(threads=1), blas_threads.ONE_THREAD:  # one runtime thread (tuning's timings) stays one
        large()
    large()  # outside a hold: as found
    assert seen == [[2], [1], [1], [2]]
    assert _numpys() == [2]


def test_a_failing_body_leaves_no_hold_and_threads_count_their_own_bodies(two_blas_threads):
    import threading

    site = blas_threads.Adaptive()
    with policy.using(threads=2, split_adapts=True):
        for _ in range(4):  # serial and parallel turns while exploring
            with pytest.raises(RuntimeError), blas_threads.held(False, site):
                raise RuntimeError("a kernel failed")
        assert _numpys() == [2]
        seen = []
        with blas_threads.held(False, blas_threads.Adaptive()):  # this thread's body does not make another's inner
            other = threading.Thread(target=lambda: seen.append(blas_threads.Adaptive._bodies.__dict__.get("depth")))
            other.start()
            other.join()
    assert seen == [None] and blas_threads.Adaptive._bodies.depth == 0
