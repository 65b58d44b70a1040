"""NumPy's BLAS thread count, lowered to one while kernels that run their own threads (gemm.py's split GEMM,
on numba's OpenMP threads) take the cores.

Both pools keep their idle threads spinning for a while after each call, so that the next call starts at
once. When a program alternates between them (ViT-tiny's delegate: packed GEMMs for the linear layers, BLAS
for the attention's batch matmuls), each pool's spinning thread takes the core the other pool's thread
needs, and every call waits for a thread the OS has descheduled (ViT-tiny's delegate ran several times
slower: docs/benchmarks.md, "Figures behind the code"). With BLAS on one thread for the run, only numba's pool
spins. The count is set through OpenBLAS's C API (``openblas_set_num_threads``, found in the library NumPy
loaded, under the names its builds export), about a microsecond a call; with another BLAS (MKL, Accelerate)
nothing is found and nothing changes.

Where nothing of the run splits over numba's threads (the NumPy tier, a portable program), BLAS's own threads are
the only ones, and they too wait for each other: beside a busy neighbour (another process on a core), OpenBLAS
on 2 threads ran MobileNetV2's NumPy-tier program at 460 ms a run against 27 ms on one thread (21.6 ms on 2
threads when quiet). :class:`Adaptive` makes that a choice per call site, timed as the compiled kernels' splits
are (``compiled.split``): BLAS on its threads or on one, whichever has been faster there.

Imports only the standard library, NumPy, the policy and compiled.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
import time
from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.kernels import compiled

_api: Any = None  # (get, set) once looked up; False when NumPy's BLAS is not an OpenBLAS found here


def _lookup() -> Any:
    """NumPy's OpenBLAS ``(get_num_threads, set_num_threads)``, or False."""
    root = os.path.dirname(os.path.dirname(np.__file__))
    candidates = []
    for folder in ("numpy.libs", os.path.join("numpy", ".dylibs")):
        candidates += sorted(glob.glob(os.path.join(root, folder, "*openblas*")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_", ""):
            for suffix in ("64_", "_64", ""):
                get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    put.restype, put.argtypes = None, [ctypes.c_int]
                    return get, put
    return False


class OneThread:
    """``with ONE_THREAD:`` runs its body with NumPy's OpenBLAS on one thread and restores the count it found
    when the outermost such body ends. Nests (a fused method that calls an XNNPACK delegate enters it twice)
    and counts its entries under a lock; the count itself is process-wide, so a thread that calls BLAS while
    another runs such a body gets one thread too."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.before = 0  # the count found at the outermost entry; 0 when NumPy's BLAS is not OpenBLAS

    def __enter__(self) -> None:
        global _api
        with self.lock:
            if self.depth == 0:
                if _api is None:
                    _api = _lookup()
                self.before = _api[0]() if _api else 0
                if self.before > 1:
                    _api[1](1)
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.before > 1:
                _api[1](self.before)


ONE_THREAD = OneThread()
_FREE = contextlib.nullcontext()


class Adaptive:
    """``with site:`` runs its body (a method's run, a delegate's steps) with NumPy's OpenBLAS on one thread or
    on the threads it has, as the site's :class:`~edgetorch.runtime.policy.SplitChoice` decides from how long
    the body took with each (module docstring); as found when the policy's ``split_adapts`` is off. Entered
    through :func:`held`, which holds BLAS to one thread instead where the runtime may use only one. Inside
    another site's body (a delegate run by a method, on the same thread) it changes nothing: the outermost body
    is the one timed."""

    __slots__ = ("choice", "mode", "start")
    _bodies = threading.local()  # per thread: adaptive bodies under way (a site in another's body is inner)

    def __init__(self, budget: policy.TrialBudget | None = None) -> None:
        self.choice = policy.SplitChoice(budget)  # trials draw on the process's budget unless given another
        self.mode = 0  # this entry: 0 inner or untimed, 1 one thread timed, 2 BLAS's threads timed
        self.start = 0

    def __enter__(self) -> None:
        depth = getattr(Adaptive._bodies, "depth", 0) + 1
        Adaptive._bodies.depth = depth
        self.mode = 0
        if depth > 1 or not policy.current().split_adapts:
            return
        self.start = time.perf_counter_ns()
        self.mode = 2 if self.choice.next_parallel(self.start) else 1
        if self.mode == 1:
            ONE_THREAD.__enter__()

    def __exit__(self, *exc: object) -> None:
        Adaptive._bodies.depth -= 1
        if self.mode == 1:
            ONE_THREAD.__exit__()
        if self.mode and not exc[0]:
            end = time.perf_counter_ns()
            self.choice.record(self.mode == 2, end - self.start, end)


WIDE_MACS = 1 << 22
"""Multiply-adds from which a BLAS call inside a ``ONE_THREAD`` hold runs on BLAS's threads (:func:`widened`)."""


def widened(step: Any, macs: int) -> Any:
    """``step``, a BLAS call of ``macs`` multiply-adds, made to run on BLAS's own threads (as many as it had
    before the hold, at most the runtime's) when it runs inside a ``ONE_THREAD`` hold: a large product that
    sgemm computes faster than the packed GEMM (GPT-2's 128 x 768 x 50257 head, a third of its multiply-adds)
    would otherwise run on one thread in a delegate whose other layers split over numba's threads. Those are
    idle while it runs. Small products keep the hold (two calls into OpenBLAS cost about a microsecond each)."""
    return step if macs < WIDE_MACS else partial(_widened, step)


def _widened(step: Any) -> Any:
    threads = min(ONE_THREAD.before, compiled.get_num_threads())
    if ONE_THREAD.depth == 0 or threads < 2:
        return step()
    _api[1](threads)
    try:
        return step()
    finally:
        _api[1](1)


def held(active: bool, site: Adaptive | None = None) -> Any:
    """``ONE_THREAD`` when ``active`` (the code about to run splits kernels over numba's threads) or when the
    runtime may use only one thread (``compiled.get_num_threads``: ``set_num_threads(1)`` holds for BLAS too);
    else the call site's :class:`Adaptive` choice, or, without one, a context that changes nothing."""
    if active or compiled.get_num_threads() < 2:
        return ONE_THREAD
    return _FREE if site is None else site
