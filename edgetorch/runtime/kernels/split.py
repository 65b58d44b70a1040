"""Two halves of one kernel call on two cores, with a helper thread that sleeps between calls.

numba's ``prange`` runs on OpenMP's threads, whose workers spin for milliseconds after each loop: in a program
that also calls BLAS (every float model), that spinning takes the core OpenBLAS's second thread needs, and a
MobileNetV2 whose depthwise layers split that way ran 11x slower (docs/benchmarks.md). The helper here waits on
a lock instead, so its core is free the moment its half is done.

:func:`both` runs ``first`` on the calling thread and ``second`` on the helper. Both must release the GIL for
their work (numba's ``nogil`` kernels do), or they take turns instead of running together. One split runs at a
time: a call that finds the helper busy (another executor thread is splitting) runs its halves one after the
other, which gives the same results. Handing a half over and waiting for it costs some 10-20 us, so callers
split only work that takes several times that (:data:`MIN_WORK`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

from edgetorch.runtime.kernels import compiled

# Work, in the caller's unit of multiply-adds or elements touched, below which a split is not worth its hand-off.
MIN_WORK = 200_000


class _Helper:
    """One daemon thread that runs the halves it is handed; ``go`` and ``done`` are held locks used as
    binary semaphores (a C-level futex wait: no Python-level polling, no spinning)."""

    def __init__(self) -> None:
        self.busy = threading.Lock()
        self.go = threading.Lock()
        self.done = threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job: Callable[[], Any] | None = None
        self.error: BaseException | None = None
        self.pid = os.getpid()
        threading.Thread(target=self._loop, name="edgetorch-split", daemon=True).start()

    def _loop(self) -> None:
        while True:
            self.go.acquire()
            job, self.job = self.job, None
            try:
                if job is not None:
                    job()
            except BaseException as e:  # handed back to the caller of both()
                self.error = e
            self.done.release()


_helper: _Helper | None = None
_start = threading.Lock()


def _get() -> _Helper:
    global _helper
    helper = _helper
    if helper is None or helper.pid != os.getpid():  # a forked child has the object but not the thread
        with _start:
            if _helper is None or _helper.pid != os.getpid():
                _helper = _Helper()
            helper = _helper
    return helper


def big_enough(work: int) -> bool:
    """Whether work of this size (multiply-adds, or elements touched) is worth a split: at least
    :data:`MIN_WORK`."""
    return work >= MIN_WORK


def both(first: Callable[[], Any], second: Callable[[], Any]) -> None:
    """Run ``first`` here and ``second`` on the helper thread at the same time; return when both are done.
    An exception in either is raised here (``first``'s when both fail)."""
    helper = _get()
    if not helper.busy.acquire(blocking=False):
        first()
        second()
        return
    try:
        helper.job = second
        helper.go.release()
        try:
            first()
        finally:
            helper.done.acquire()
        error, helper.error = helper.error, None
        if error is not None:
            raise error
    finally:
        helper.busy.release()


def rows(run: Callable[[int, int], Any], total: int) -> None:
    """``run(0, total)``, as ``run(0, cut)`` and ``run(cut, total)`` on two cores when two threads are allowed
    (:func:`edgetorch.runtime.set_num_threads`, read at every call); ``run`` must give the same results for
    any cut (each call writes only its own rows)."""
    if total > 1 and compiled.get_num_threads() >= 2:
        cut = (total + 1) // 2
        both(partial(run, 0, cut), partial(run, cut, total))
    else:
        run(0, total)
