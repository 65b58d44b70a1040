"""Kernel choice by measuring the host: for an op family (``"gemm"``, later ``"conv"``, ...) and a shape, the
candidate kernels that compute the same result are timed once, when a program loads, and the fastest runs.

The policy's fixed thresholds were measured on one CPU; another CPU (another vector width, another BLAS build)
orders the same candidates differently, so the order is measured where the program runs. A family registers
nothing: the code that builds a step asks :func:`choose` with the candidates' names and a function that builds
them on private operands of the shape (never the program's memory, whose other tensors the calls would
overwrite), and gets a :class:`Decision` back.

Bounded: candidates are timed on one thread (NumPy's BLAS and the compiled tier's split alike), alternately,
the best of a few calls, for at most ``SHAPE_SECONDS`` a shape after one warm-up call each, and a program load
(:func:`loading`) spends at most ``LOAD_SECONDS`` on the timed calls (not on the warm-ups, whose first one
compiles a kernel once a process); past it the default (the first name) runs. A shape with one
eligible candidate is not timed.

Timed by the calling thread's CPU time, not the wall clock: on a busy machine the OS deschedules the loading
thread now and then, a wall-clock time taken then is the neighbour's as much as the kernel's, and decisions are
cached for good (docs/benchmarks.md, "Tuning by the thread's CPU time": one such time kept GPT-2's head on the
slower kernel). A family whose candidates run threads of their own (``threaded``) is timed by the wall clock, as
is every family where the thread's CPU clock is coarser than a microsecond (Windows).

With the policy's ``tune`` off the default runs, or the name the policy's
``kernel_choices`` fixes (tests use these, so their results never depend on timing).

Cached: decisions are kept in one JSON file, ``kernels.json`` in ``EDGETORCH_CACHE_DIR``, else
``$XDG_CACHE_HOME/edgetorch``, else ``~/.cache/edgetorch``, under a host key made of the CPU model, its ISA
flags and the versions of edgetorch, NumPy, numba and llvmlite (a new version may change which kernel wins). A
directory that cannot be written keeps the decisions in memory for the process; a file that does not parse as
the expected JSON is ignored and rewritten. Nothing read from it is evaluated.

Imports only the standard library, NumPy and the runtime's policy and BLAS thread control.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import MappingProxyType
from typing import Any

from edgetorch.runtime import policy
from edgetorch.runtime.host import host as this_host
from edgetorch.runtime.host import host_from, read_cpuinfo
from edgetorch.runtime.kernels import blas_threads

SHAPE_SECONDS = 0.05
LOAD_SECONDS = 2.0
REPEATS = 5
FORMAT = 2  # 2: times are the thread's CPU time (1: wall clock, re-measured)
MAX_HOSTS = 8  # host entries one file keeps (a home directory shared between machines)
FILE_NAME = "kernels.json"

MEASURED, CACHED, ONLY, POLICY_OFF, FIXED, BUDGET = (
    "measured",
    "cached",
    "only candidate",
    "policy off",
    "fixed by policy",
    "tuning budget spent",
)


@dataclass(frozen=True)
class Decision:
    """Which kernel runs for one shape of one family, and why (one of the reasons above); ``times`` holds
    each candidate's best time in seconds when they were measured (now or in an earlier process)."""

    family: str
    key: str
    kernel: str
    reason: str
    times: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def describe(self) -> str:
        """One line: the kernel, why, and the times (microseconds) when measured."""
        text = f"{self.kernel} ({self.reason}"
        if self.times:
            text += ": " + ", ".join(f"{n} {t * 1e6:.1f} us" for n, t in sorted(self.times.items(), key=_second))
        return text + ")"


def _second(item: tuple[str, float]) -> float:
    return item[1]


def choose(
    family: str,
    key: str,
    names: Sequence[str],
    build: Callable[[], Mapping[str, Callable[[], object]]],
    where: str = "",
    threaded: bool = False,
) -> Decision:
    """The kernel of ``names`` (the first is the default) that runs ``family``'s shape ``key``. ``build``
    returns, for each name, a call that runs that candidate once on private operands of the shape; it is
    called only when the candidates are timed (by the wall clock where the candidates are ``threaded``).
    ``where`` names the node for :func:`recording`."""
    decision = _decide(family, key, list(names), build, threaded)
    for log in _logs():
        log.append((where, decision))
    return decision


def _decide(
    family: str,
    key: str,
    names: list[str],
    build: Callable[[], Mapping[str, Callable[[], object]]],
    threaded: bool = False,
) -> Decision:
    if not names:
        raise ValueError(f"tuning {family} {key}: no candidates")
    current = policy.current()
    fixed = current.kernel_choices.get(f"{family}:{key}", current.kernel_choices.get(family))
    if fixed is not None and fixed in names:
        return Decision(family, key, fixed, FIXED)
    if not current.tune:
        return Decision(family, key, names[0], POLICY_OFF)
    if len(names) == 1:
        return Decision(family, key, names[0], ONLY)
    cached = _CACHE.get(family, key)
    if cached is not None and set(cached) == set(names):
        return Decision(family, key, min(names, key=cached.__getitem__), CACHED, MappingProxyType(cached))
    if _BUDGET.spent() >= LOAD_SECONDS:
        return Decision(family, key, names[0], BUDGET)
    candidates = build()
    with policy.using(threads=1), blas_threads.ONE_THREAD:
        for run in candidates.values():  # the warm-up (a first call compiles): not charged to the load
            run()
    with _BUDGET.counting():
        times = measure(candidates, warm_up=False, threaded=threaded)
    _CACHE.put(family, key, times)
    return Decision(family, key, min(names, key=times.__getitem__), MEASURED, MappingProxyType(times))


# A thread CPU clock that resolves microseconds (Linux: nanoseconds); Windows' counts in 15.6 ms ticks, which would
# time every kernel at 0, so there the wall clock stays.
_FINE_THREAD_CLOCK = time.get_clock_info("thread_time").resolution <= 1e-6


def measure(
    candidates: Mapping[str, Callable[[], object]],
    seconds: float = SHAPE_SECONDS,
    warm_up: bool = True,
    threaded: bool = False,
) -> dict[str, float]:
    """Each candidate's best time (seconds) over up to ``REPEATS`` calls taken in turn, after one warm-up
    call each (compiles, pages in the operands) unless ``warm_up`` is False, stopping once ``seconds`` have
    passed; on one thread, timed by its CPU time (module docstring), or by the wall clock where the candidates
    run threads of their own (``threaded``)."""
    clock = time.perf_counter_ns if threaded or not _FINE_THREAD_CLOCK else time.thread_time_ns
    with policy.using(threads=1), blas_threads.ONE_THREAD:
        start = time.perf_counter()
        for run in candidates.values() if warm_up else ():
            run()
        best = dict.fromkeys(candidates, math.inf)
        for _ in range(REPEATS):
            for name, run in candidates.items():
                t0 = clock()
                run()
                best[name] = min(best[name], (clock() - t0) * 1e-9)
            if time.perf_counter() - start >= seconds:
                break
    return best


class _Budget:
    """Seconds spent timing during the current program load (or the process, outside :func:`loading`)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def spent(self) -> float:
        return float(getattr(self.local, "spent", 0.0))

    def reset(self) -> float:
        before, self.local.spent = self.spent(), 0.0
        return before

    @contextmanager
    def counting(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.local.spent = self.spent() + time.perf_counter() - t0


_BUDGET = _Budget()
_LOGS = threading.local()


@contextmanager
def loading() -> Iterator[None]:
    """A program load: the timing inside the block has its own ``LOAD_SECONDS``."""
    before = _BUDGET.reset()
    try:
        yield
    finally:
        _BUDGET.local.spent = before


def _logs() -> list[list[tuple[str, Decision]]]:
    return getattr(_LOGS, "stack", [])


@contextmanager
def recording() -> Iterator[list[tuple[str, Decision]]]:
    """The decisions taken inside the block, as (where, decision), in order (``edgetorch inspect --kernels``)."""
    log: list[tuple[str, Decision]] = []
    _LOGS.stack = [*_logs(), log]
    try:
        yield log
    finally:
        _LOGS.stack = [s for s in _logs() if s is not log]


def cache_dir() -> Path:
    """Where the decisions file lives (module docstring)."""
    chosen = os.environ.get("EDGETORCH_CACHE_DIR", "").strip()
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg) if xdg else Path.home() / ".cache") / "edgetorch"


CPUINFO: str | None = None  # another cpuinfo file to read instead of this host's (tests)


def _cpu() -> tuple[str, str]:
    """The CPU model and all its flags (sorted, space-separated), as :mod:`edgetorch.runtime.host` reads them."""
    h = this_host() if CPUINFO is None else host_from(read_cpuinfo(CPUINFO))
    return h.model, " ".join(sorted(h.flags))


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def host() -> dict[str, str]:
    """What a decision depends on besides the shape: the CPU and the libraries' versions."""
    model, flags = _cpu()
    info = {"machine": platform.machine(), "cpu": model, "flags": hashlib.sha256(flags.encode()).hexdigest()[:16]}
    for package in ("edgetorch", "numpy", "numba", "llvmlite"):
        info[package] = _version(package)
    return info


class _Cache:
    """The decisions file, read once per process and written after each new measurement."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.decisions: dict[str, dict[str, float]] | None = None  # "family|key" -> times, this host's
        self.host_key = ""
        self.writable = True

    def _load(self) -> dict[str, dict[str, float]]:
        if self.decisions is None:
            self.host_key = hashlib.sha256(json.dumps(host(), sort_keys=True).encode()).hexdigest()[:20]
            self.decisions = _valid_hosts(_read(cache_dir() / FILE_NAME)).get(self.host_key, {})
        return self.decisions

    def get(self, family: str, key: str) -> dict[str, float] | None:
        with self.lock:
            times = self._load().get(f"{family}|{key}")
            return dict(times) if times is not None else None

    def put(self, family: str, key: str, times: Mapping[str, float]) -> None:
        with self.lock:
            self._load()[f"{family}|{key}"] = {n: float(t) for n, t in times.items() if math.isfinite(t)}
            if self.writable:
                self.writable = self._write()

    def _write(self) -> bool:
        """Merge this host's decisions into the file (other hosts' entries kept); False when it cannot be
        written (the decisions then stay in memory)."""
        path = cache_dir() / FILE_NAME
        hosts = _valid_hosts(_read(path))
        hosts.pop(self.host_key, None)
        kept = dict(list(hosts.items())[-(MAX_HOSTS - 1) :]) if MAX_HOSTS > 1 else {}
        kept[self.host_key] = dict(self.decisions or {})
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".kernels-", suffix=".json", dir=path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump({"format": FORMAT, "hosts": kept}, f, sort_keys=True)
                os.replace(temp, path)
            except BaseException:
                os.unlink(temp)
                raise
        except OSError:
            return False
        return True

    def clear(self) -> None:
        """Forget what was read (the next question reads the file again)."""
        with self.lock:
            self.decisions, self.writable = None, True


def _read(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError, RecursionError):
        return None


def _valid_hosts(data: Any) -> dict[str, dict[str, dict[str, float]]]:
    """The file's hosts when ``data`` has the expected shape; entries of the wrong type are dropped."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("hosts"), dict):
        return {}
    hosts: dict[str, dict[str, dict[str, float]]] = {}
    for host_key, decisions in data["hosts"].items():
        if not isinstance(decisions, dict):
            continue
        good = {}
        for key, times in decisions.items():
            if (
                isinstance(times, dict)
                and times
                and all(
                    isinstance(n, str) and isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0
                    for n, t in times.items()
                )
            ):
                good[key] = {n: float(t) for n, t in times.items()}
        hosts[host_key] = good
    return hosts


_CACHE = _Cache()


def forget() -> None:
    """Drop the decisions read from the cache file, so that the next question reads it again (after
    ``EDGETORCH_CACHE_DIR`` changes, in tests and benchmarks)."""
    _CACHE.clear()
