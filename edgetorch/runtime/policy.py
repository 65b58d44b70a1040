"""The runtime's policy: which kernel tier runs (NumPy, or the compiled tier of ``pip install edgetorch[fast]``),
how many threads kernels may use, and the sizes from which work is split over threads or weights are packed.

One object holds all of it, read where a kernel is chosen (mostly at load, when steps are built). It is the
one place that decides the tier: :func:`compiled_tier` says whether compiled kernels may be used at all, so a
builder that returns None means "this shape is not one the compiled kernel takes", never "the tier is off"
(a builder called with the tier off raises :class:`TierOffError`).
Tests and benchmarks install another policy with :func:`using` instead of patching module globals.

Imports only the standard library and NumPy (numba is imported on the first question about the tier).
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from edgetorch.errors import EdgetorchError, InvalidArgumentError


def _numba_found() -> bool:
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # a broken install, or an import hook that refuses it
        return False


def _default_threads() -> int:
    """``EDGETORCH_NUM_THREADS`` when set (a positive integer), else the CPUs this process may run on. Read
    at every split, so the variable may change while a program is loaded; each value is parsed once."""
    return _threads_for(os.environ.get("EDGETORCH_NUM_THREADS", ""))


@functools.cache
def _threads_for(value: str) -> int:
    if value.strip():
        return checked_threads(value.strip(), "EDGETORCH_NUM_THREADS")
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def checked_threads(value: object, source: str) -> int:
    """``value`` as a thread count, or :class:`InvalidArgumentError` naming ``source``."""
    n = int(value) if isinstance(value, str) and value.strip().isdigit() else value
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InvalidArgumentError(
            f"{source}: expected a positive whole number of threads, got {value!r}; pass 1 to run every kernel "
            "on the calling thread, or the number of cores to use"
        )
    return int(n)


# How long (in spin iterations) an idle thread of numba's OpenMP layer (libgomp) spins before it sleeps. libgomp
# reads this once, when it loads, and spins 300,000 iterations by default: on a busy machine a thread that
# waits at a barrier for a descheduled peer burns its time slice spinning (docs/benchmarks.md, "Threads under
# load"). Set when this module is imported unless the user chose a policy (``GOMP_SPINCOUNT`` or
# ``OMP_WAIT_POLICY``); it holds where edgetorch is imported before anything loads libgomp (torch bundles its
# own copy under the same name).
SPIN_COUNT = 0


def _give_cores_back() -> None:
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


_give_cores_back()


class TrialBudget:
    """The time that trials of splitting may lose, process-wide: each trial of a parallel variant that took
    longer than its site's serial one adds the difference, which is paid back at :attr:`RATE` of the wall
    time; no parallel trial starts while more than :attr:`BURST_NS` is owed. On a quiet machine a split that
    wins owes nothing; on a busy one, where a split can wait milliseconds for a descheduled thread, the many
    call sites of a model (an LLM has hundreds) cannot spend more than a few percent of the run finding out."""

    RATE = 0.05
    BURST_NS = 2_000_000

    __slots__ = ("owed", "last")

    def __init__(self) -> None:
        self.owed = 0.0
        self.last = 0

    def allows(self, now_ns: int) -> bool:
        """Whether a parallel trial may start at ``now_ns`` (a monotonic clock in nanoseconds)."""
        self._repay(now_ns)
        return self.owed < self.BURST_NS

    def spend(self, lost_ns: float, now_ns: int) -> None:
        """A parallel trial ending at ``now_ns`` took ``lost_ns`` longer than the serial variant."""
        self._repay(now_ns)
        self.owed += max(lost_ns, 0.0)

    def _repay(self, now_ns: int) -> None:
        if now_ns > self.last:
            self.owed = max(0.0, self.owed - (now_ns - self.last) * self.RATE)
            self.last = now_ns


TRIAL_BUDGET = TrialBudget()


class SplitChoice:
    """Whether one kernel call site that may split (``compiled.split``) runs its parallel or its serial
    variant, decided from how long each took there: both are timed in turn at first (serial first), then the
    faster one runs and the other is tried again now and then, less often each time it still loses. A split
    whose threads cannot all run at once (a busy neighbour, a loaded machine) waits at its barrier for a
    descheduled thread and takes longer than the serial loop; the site then stops splitting until a later
    trial finds the threads fast again. Splitting must win by :attr:`MARGIN`, since its threads take cores
    others may want, and parallel trials draw on a :class:`TrialBudget` shared by every site.

    One slow call cannot decide: a time counts at most :attr:`OUTLIER` times the estimate it updates, so a
    site that splits stops only after several slow calls in a row (a busy neighbour that stays), not after
    one descheduled moment. And a site that runs serially tries splitting again after :attr:`MAX_WAIT_NS` at the
    latest, however few calls it has had (a site called once a token or once an image would otherwise wait
    hundreds of them after a busy neighbour left); those trials draw on the budget. A site that splits needs no
    such deadline: its own calls keep measuring the parallel variant, and a slower one switches it.

    Pure bookkeeping, no clock of its own: the caller passes the clock and each call's duration in nanoseconds
    (so the decision logic is tested without timing anything)."""

    TRIALS = 2
    """Timed calls of each variant before the first choice (after one untimed call each: its first call may
    compile or load the kernel)."""
    MARGIN = 0.9
    """Split only where the parallel variant takes at most this fraction of the serial one."""
    FIRST_INTERVAL = 32
    """Calls between a trial of the losing variant and the next, after a switch; doubled after each trial that
    does not change the choice, up to :attr:`MAX_INTERVAL`."""
    MAX_INTERVAL = 512
    MAX_WAIT_NS = 250_000_000
    """Nanoseconds after which a site running serially tries the parallel variant whatever its calls since the
    last trial. Not the other way round: with a deadline on serial trials, a site called once an inference of
    about that length (GPT-2's) ran every other inference serially (docs/benchmarks.md, "Split trials")."""
    OUTLIER = 2.0
    """The most a call's time counts for, as a multiple of the estimate it updates."""

    __slots__ = ("samples", "estimate", "parallel", "interval", "countdown", "trying", "budget", "since")

    def __init__(self, budget: TrialBudget | None = None) -> None:
        self.samples: tuple[list[int], list[int]] = ([], [])  # calls while exploring: serial, parallel
        self.estimate = [0.0, 0.0]  # ns a call, serial and parallel, once explored
        self.parallel = True  # the variant chosen
        self.interval = self.FIRST_INTERVAL
        self.countdown = -1  # calls until the next trial; -1 while exploring
        self.trying = False  # this call is a trial of the losing variant
        self.budget = TRIAL_BUDGET if budget is None else budget
        self.since = 0  # clock (ns) of the last choice or trial

    def next_parallel(self, now_ns: int = 0) -> bool:
        """Whether the call starting at ``now_ns`` should run the parallel variant."""
        if self.countdown < 0:  # exploring: the variant with fewer calls so far, serial first
            serial, parallel = self.samples
            return len(parallel) < len(serial) and self.budget.allows(now_ns)
        if self.countdown > 0 and not self.parallel and now_ns - self.since >= self.MAX_WAIT_NS:
            self.countdown = 0
        if self.countdown == 0 and (self.parallel or self.budget.allows(now_ns)):
            self.trying = True
            return not self.parallel
        return self.parallel

    def record(self, parallel: bool, ns: int, now_ns: int = 0) -> None:
        """The call that just ran ``parallel`` (or serial) took ``ns`` nanoseconds, ending at ``now_ns``."""
        if self.countdown < 0:
            mine = self.samples[parallel]
            if len(mine) <= self.TRIALS:
                mine.append(ns)
            else:  # serial calls while the budget holds parallel trials back: keep the fastest
                mine[-1] = min(mine[-1], ns)
            if parallel:  # a first call may compile: what it may owe is capped
                lost = ns - min(self.samples[0][1:] or self.samples[0])
                self.budget.spend(lost if len(mine) > 1 else min(lost, self.budget.BURST_NS), now_ns)
            if min(map(len, self.samples)) > self.TRIALS:  # the first call of each is not counted
                self.estimate = [float(min(s[1:])) for s in self.samples]
                self.samples = ([], [])
                self.parallel = self._parallel_wins()
                self.countdown, self.since = self.interval, now_ns
            return
        if self.trying:  # the loser's trial: a faster time is believed at once, a slower one halfway
            self.trying = False
            if parallel:
                self.budget.spend(ns - self.estimate[0], now_ns)
            old = self.estimate[parallel]
            self.estimate[parallel] = float(ns) if ns < old else (old + min(ns, self.OUTLIER * old)) / 2
            if self._parallel_wins() != self.parallel:
                self._switch(now_ns)
            else:
                self.interval = min(2 * self.interval, self.MAX_INTERVAL)
                self.countdown, self.since = self.interval, now_ns
            return
        old = self.estimate[parallel]
        self.estimate[parallel] += (min(ns, self.OUTLIER * old) - old) / 8
        self.countdown = max(self.countdown - 1, 0)  # stays due while the budget holds a parallel trial back
        if self._parallel_wins() != self.parallel:
            self._switch(now_ns)

    def _parallel_wins(self) -> bool:
        return self.estimate[1] <= self.MARGIN * self.estimate[0]

    def _switch(self, now_ns: int) -> None:
        self.parallel = not self.parallel
        self.interval = self.FIRST_INTERVAL
        self.countdown, self.since = self.interval, now_ns


_MAX_ROWS = MappingProxyType({("qc8w", False): 32, ("qc8w", True): 16, ("qb4w", False): 16, ("qb4w", True): 8})


@dataclass(frozen=True)
class Policy:
    """What the hot path may spend. Every size is a threshold a kernel compares its own work against; the
    reasons behind each default, with their measurements, are in docs/benchmarks.md."""

    compiled: bool = True
    """Use the compiled tier where an op has a compiled kernel (off: NumPy everywhere; also off when numba is
    absent, fails to import, or ``EDGETORCH_FAST=0``)."""
    threads: int | None = None
    """Threads a kernel that splits its work may use (None: ``EDGETORCH_NUM_THREADS`` or the CPUs available)."""
    pack_budget: int = 128 << 20
    """Bytes of packed float32 GEMM weights a method (or an XNNPACK delegate) may keep beside its own
    (:meth:`packs`)."""
    split_macs: int = 200_000
    """Multiply-adds from which the packed GEMM and Winograd's convolution split over threads."""
    split_elements: int = 32_768
    """Elements from which a compiled row kernel (GELU, softmax, layer norm, bias epilogues) splits."""
    split_outputs: int = 16_384
    """Outputs from which the XNNPACK delegate's compiled window kernels (depthwise, im2col, pooling) split."""
    winograd_block_bytes: int = 64 * 1024
    """Bytes of transformed inputs one block of Winograd's convolution holds."""
    batch_macs: int = 20_000
    """Multiply-adds from which a batched product of changing operands (attention's) runs the packed GEMM:
    below, packing each batch costs more than it saves and ``np.matmul`` keeps it."""
    winograd_min_tiles: int = 16
    """Output tiles (2x2 each) from which a 3x3 convolution runs Winograd's: fewer read the transformed weights
    for too little work."""
    tune_macs: int = 16_000_000
    """Multiply-adds of the largest product tuning times in full; a larger one is timed on its first output
    channels only, so that a language model's head is not run in full several times at load."""
    gemv_tuned_rows: int = 64
    """Most input rows for which tuning times an integer GEMV against sgemm; sgemm beyond."""
    gemv_split_macs: int = 300_000
    """Multiply-adds from which an integer GEMV of the XNNPACK delegate splits over threads."""
    split_adapts: bool = True
    """Each call site that may split times its parallel and serial variants and runs the faster
    (:class:`SplitChoice`); off: it splits whenever it has more than one thread, as before."""
    gemv_wide: int = 2048
    """Output channels from which a 4-bit weight's bytes are grouped over all channels, not 64."""
    gemv_float_budget: int = 16 << 20
    """Bytes of stored weights (named data) up to which a quantized program keeps a layer's float32 weights once
    the layer is called with more rows than its GEMV takes: dequantizing per call would cost a small model more
    than the sgemm. A larger one (an LLM) dequantizes per call into one scratch buffer, which keeps its memory
    near the file's size. Per program, not per delegate: an LLM is lowered as many small delegates."""
    gemv_max_rows: Mapping[tuple[str, bool], int] = field(default_factory=lambda: _MAX_ROWS)
    """Most input rows the integer GEMV kernels take, by (weight kind, float32 copies kept); sgemm beyond: the
    row counts up to which each kernel beat the sgemm on every shape measured (bench/qgemv_ab.py --gemv). All
    0: every node as before the GEMV."""
    tune: bool = True
    """Choose among candidate kernels by timing them on this host when a program loads, the decisions cached on
    disk (runtime/tuning.py; off: ``EDGETORCH_TUNE=0``, and the thresholds above decide)."""
    compile_in_background: bool = True
    """A program loaded from a file whose fast-tier kernels are not compiled on this machine yet starts their
    compile in a background process and runs this process on the NumPy tier (runtime/warm.py); off
    (``EDGETORCH_COMPILE=wait``): they compile in this process, before its first run."""
    kernel_choices: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Fixed decisions that override tuning: ``"family"`` or ``"family:key"`` (e.g. ``"gemm"``,
    ``"gemm:64x128x256"``) -> the kernel's name, for tests and benchmarks that must not depend on timing."""

    def packs(self, weight_bytes: int) -> bool:
        """Whether a method, or an XNNPACK delegate, packs its float32 GEMM weights that sgemm would read in
        place, ``weight_bytes`` of them in all: every one when they fit :attr:`pack_budget`, else none. A
        method that packs holds BLAS to one thread for its other products too (blas_threads.py), so packing
        some is no middle way; and a model that large (an LLM) keeps its memory near the file's size. Whether
        the compiled tier is usable is :func:`compiled_tier`'s question."""
        return 0 <= weight_bytes <= self.pack_budget

    def thread_count(self) -> int:
        """:attr:`threads`, or the default when unset."""
        return self.threads if self.threads is not None else _default_threads()


_current = Policy(
    compiled=os.environ.get("EDGETORCH_FAST", "1") != "0",
    tune=os.environ.get("EDGETORCH_TUNE", "1") != "0",
    compile_in_background=os.environ.get("EDGETORCH_COMPILE", "background").strip() != "wait",
)
_numba: bool | None = None  # None: not tried; then whether numba imported


def current() -> Policy:
    """The policy in force."""
    return _current


def install(policy: Policy) -> None:
    """Make ``policy`` the one in force (``set_num_threads`` and :func:`using` go through here)."""
    global _current
    if not isinstance(policy, Policy):
        raise InvalidArgumentError(f"expected an edgetorch.runtime.policy.Policy, got {type(policy).__name__}")
    _current = policy


@contextmanager
def using(**changes: Any) -> Iterator[Policy]:
    """The current policy with ``changes`` (field names of :class:`Policy`) in force inside the block (the same
    policy when it already has them: an XNNPACK schedule is built under one)."""
    before = _current
    if any(getattr(before, name, using) != value for name, value in changes.items()):
        install(dataclasses.replace(before, **changes))
    try:
        yield _current
    finally:
        install(before)


def compiled_tier() -> bool:
    """Whether compiled kernels may be used now: the policy allows them and numba imports. The first True
    answer imports numba (about half a second, paid only by a program that reaches a compiled kernel); if that
    import fails (installed but broken, e.g. a mismatched llvmlite), the tier stays off for the process."""
    global _numba
    if not _current.compiled:
        return False
    if _numba is None:
        _numba = _numba_found()
        if _numba:
            _load_tbb()
            try:
                import numba  # noqa: F401
            except ImportError:
                _numba = False
    return _numba


def _load_tbb() -> None:
    """Load TBB's library where the ``tbb`` wheel (``edgetorch[fast]``) put it, so that numba runs its parallel
    loops on TBB's threads rather than OpenMP's: pip installs the library into the environment's ``lib/``,
    which the dynamic loader does not search, so numba would not find it by name. TBB's workers keep working
    between parallel loops that follow each other within microseconds and give the cores back under load, where
    OpenMP's (``GOMP_SPINCOUNT=0`` above) sleep after every loop: MobileNetV2 at 2 threads 7.3 -> 5.4 ms
    (docs/benchmarks.md, "numba on TBB"). Nothing happens when the user chose a layer
    (``NUMBA_THREADING_LAYER``), off Linux, or without the wheel."""
    if "NUMBA_THREADING_LAYER" in os.environ or sys.platform != "linux":
        return
    try:
        dist = importlib.metadata.distribution("tbb")
    except importlib.metadata.PackageNotFoundError:
        return
    for file in dist.files or ():
        if file.name == "libtbb.so.12":
            try:
                ctypes.CDLL(str(dist.locate_file(file)), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
            return


class TierOffError(EdgetorchError, RuntimeError):
    """A compiled step was asked for while the compiled tier is off: the caller skipped :func:`compiled_tier`.
    Step builders answer None only for "this kernel does not take these arrays", so the two never mix."""


def compiled_tier_possible() -> bool:
    """Whether the policy allows compiled kernels and numba is installed, without importing numba (a process
    about to run on the NumPy tier need not pay for it): :func:`compiled_tier` may still find it unusable."""
    return _current.compiled and (_numba if _numba is not None else _numba_found())


def compiled_tier_loaded() -> bool:
    """Whether compiled kernels may be used and numba is already imported: for a kernel whose gain is smaller
    than what importing numba costs a process (~150 MB resident)."""
    return _current.compiled and "numba" in sys.modules and compiled_tier()
