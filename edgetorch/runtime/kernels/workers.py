"""A pool of worker threads for native kernels of a few microseconds (the XNNPACK delegate's VNNI GEMV): a
kernel split in parts runs on the calling thread and on workers that spin between calls while a model runs,
and sleep once idle.

numba's OpenMP threads are woken for each parallel loop (the runtime sets ``GOMP_SPINCOUNT=0``, policy.py, so
that they give their cores back under load), which costs more than a decode step's GEMV of 5-20 us gains by
splitting. Here, instead:

* A job is ``parts`` calls ``fn(base + i * stride)``: a native function taking a pointer to its own argument
  block (one per part, so parts need no shared scratch). The caller publishes it with one atomic store of a
  64-bit *ticket* (generation, parts, next part), and every thread, the caller included, claims parts by
  fetch-and-add on the ticket until none is left; the caller then waits until the parts it did not run are
  done. A worker that the OS has descheduled claims nothing, so the caller runs its parts instead of waiting
  for it: only a part a worker has begun can keep the caller waiting.
* A worker spins on the ticket (``pause``) for :data:`SPIN_US` after its last part, then sleeps on a futex
  (the ticket's generation word); the caller wakes sleepers with one system call, and runs the parts itself
  meanwhile. A caller waiting for a worker's part spins for :data:`YIELD_US`, then yields its core at each check.
* A second thread that calls while a job runs (two programs run from two threads) does its parts alone.
* With no workers (one thread, another OS, no llvmlite) a job is its parts run in turn on the caller.

The pool, its state and its workers are per process; the workers run in Python threads that call the native
loop (ctypes releases the GIL), stopped at exit (before the interpreter frees the compiled code) and when the
thread count changes. x86-64 Linux only (``pause``, the cycle counter, the futex system call); elsewhere the
jobs run on the caller.

Imports only the standard library and NumPy; llvmlite on the first compile.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import sys
import threading
import time
from typing import Any

import numpy as np

from edgetorch.runtime.kernels import llvm_jit

SPIN_US = 300
"""How long an idle worker spins before it sleeps: longer than the gaps between a decode step's GEMVs (the
attention and the cache updates between two delegates take 50-100 us), shorter than what a busy neighbour
would notice (docs/benchmarks.md, "A pool for the decode's GEMVs")."""
YIELD_US = 50
"""How long a caller waits for a worker's part spinning (or as long as its job ran, if longer) before it
takes the worker to have lost its core: it yields its own core at each check then, and the workers rest."""
JUMP_US = 100
"""A spinning worker whose cycle counter jumps by more than this between two checks was descheduled: it rests."""
REST_MS = 20
"""How long a worker that lost its core sleeps, whatever jobs come (the caller runs their parts): on a machine
whose cores are all busy a spinning worker only takes time from the caller and the neighbours."""
MAX_PARTS = 1 << 15

# The state block (int64 words): each word the threads write on a cache line of its own; the settings (spin,
# yield, jump, the rest's timespec) share one line, written once.
_TICKET, _FN, _BASE, _STRIDE, _DONE, _SLEEPERS, _STOP, _OWNER = 0, 8, 9, 10, 16, 24, 32, 40
_SPIN, _YIELD, _JUMP, _REST_S, _REST_NS = 48, 49, 50, 51, 52
_PARK, _CONTENDED, _REST = 56, 64, 72
_WORDS = 80
_FUTEX_WAIT, _FUTEX_WAKE, _SYS_FUTEX, _SYS_YIELD = 128, 129, 202, 24  # the _PRIVATE futex operations


def _ir() -> str:
    """``pool_run(state, job)``: run the job [fn, base, stride, parts] (int64 each); ``pool_worker(state)``: a
    worker's loop, until the state's stop word is set; ``pool_clock()``: the cycle counter."""
    lines = [
        "declare void @llvm.x86.sse2.pause()",
        "declare i64 @llvm.readcyclecounter()",
        "declare i64 @syscall(i64, ...)",
        "define i64 @pool_clock() {\n  %c = call i64 @llvm.readcyclecounter()\n  ret i64 %c\n}",
    ]
    add = lines.append
    words = {"ticket": _TICKET, "fnw": _FN, "basew": _BASE, "stridew": _STRIDE, "done": _DONE,
             "sleepers": _SLEEPERS, "stop": _STOP, "owner": _OWNER, "spinw": _SPIN, "yieldw": _YIELD,
             "jumpw": _JUMP, "rests": _REST_S, "park": _PARK, "contended": _CONTENDED, "rest": _REST}  # fmt: skip

    def fields() -> None:
        for name, word in words.items():
            add(f"  %{name} = getelementptr inbounds i64, i64* %s, i64 {word}")
        add("  %t8 = bitcast i64* %ticket to i8*\n  %hi8 = getelementptr inbounds i8, i8* %t8, i64 4")
        add("  %gen32 = bitcast i8* %hi8 to i32*\n  %rest32 = bitcast i64* %rest to i32*")

    def run_part(tag: str, index: str, fn: str, base: str, stride: str) -> None:
        add(f"  %{tag}off = mul i64 {index}, {stride}\n  %{tag}arg = add i64 {base}, %{tag}off")
        add(f"  %{tag}fp = inttoptr i64 {fn} to void (i8*)*\n  %{tag}ap = inttoptr i64 %{tag}arg to i8*")
        add(f"  call void %{tag}fp(i8* %{tag}ap)")

    def unclaimed(tag: str, ticket: str) -> None:  # %{tag}: whether ``ticket`` has a part left to claim
        add(
            f"  %{tag}i = and i64 {ticket}, 65535\n  %{tag}p0 = lshr i64 {ticket}, 16\n  %{tag}p = and i64 %{tag}p0, 65535"
        )
        add(f"  %{tag} = icmp ult i64 %{tag}i, %{tag}p")

    # --- the caller: publish, claim parts, wait for the workers' parts
    add("define void @pool_run(i64* %s, i64* %job) {\nentry:")
    for i, name in enumerate(("fn", "base", "stride", "parts")):
        add(f"  %{name}.p = getelementptr inbounds i64, i64* %job, i64 {i}\n  %{name} = load i64, i64* %{name}.p")
    fields()
    add("  %own = cmpxchg i64* %owner, i64 0, i64 1 acquire monotonic\n  %owned = extractvalue { i64, i1 } %own, 1")
    add("  br i1 %owned, label %publish, label %serial")
    add("serial:\n  %si = phi i64 [0, %entry], [%sinext, %serialpart]")
    add("  %sdone = icmp uge i64 %si, %parts\n  br i1 %sdone, label %exit, label %serialpart")
    add("serialpart:")
    run_part("s", "%si", "%fn", "%base", "%stride")
    add("  %sinext = add i64 %si, 1\n  br label %serial")
    add("publish:")
    add("  %pub = call i64 @llvm.readcyclecounter()")
    add("  store i64 %fn, i64* %fnw\n  store i64 %base, i64* %basew\n  store i64 %stride, i64* %stridew")
    add("  store atomic i64 0, i64* %done monotonic, align 8\n  store atomic i64 0, i64* %park monotonic, align 8")
    add("  %old = load atomic i64, i64* %ticket monotonic, align 8")
    add("  %gen0 = lshr i64 %old, 32\n  %gen1 = add i64 %gen0, 1\n  %gen = and i64 %gen1, 4294967295")
    add("  %genhi = shl i64 %gen, 32\n  %partshi = shl i64 %parts, 16\n  %new = or i64 %genhi, %partshi")
    add("  store atomic i64 %new, i64* %ticket seq_cst, align 8")
    add("  %asleep = load atomic i64, i64* %sleepers seq_cst, align 8")
    add("  %wake = icmp sgt i64 %asleep, 0\n  br i1 %wake, label %wakeup, label %claim")
    add("wakeup:")
    add(
        f"  %woke = call i64 (i64, ...) @syscall(i64 {_SYS_FUTEX}, i32* %gen32, i32 {_FUTEX_WAKE}, i32 2147483647, i8* null)"
    )
    add("  br label %claim")
    add("claim:")
    add("  %got = atomicrmw add i64* %ticket, i64 1 acq_rel")
    add("  %ci = and i64 %got, 65535\n  %cmine = icmp ult i64 %ci, %parts\n  br i1 %cmine, label %part, label %wait")
    add("part:")
    run_part("c", "%ci", "%fn", "%base", "%stride")
    add("  %d = atomicrmw add i64* %done, i64 1 release\n  br label %claim")
    # a wait longer than both YIELD_US and the job so far means a worker lost its core mid-part: tell the
    # workers to rest (``contended``) and yield this core at each check
    add("wait:")
    add("  %ylimit0 = load i64, i64* %yieldw\n  %w0 = call i64 @llvm.readcyclecounter()\n  %ran = sub i64 %w0, %pub")
    add("  %ranlong = icmp ugt i64 %ran, %ylimit0\n  %ylimit = select i1 %ranlong, i64 %ran, i64 %ylimit0")
    add("  br label %waitloop")
    add("waitloop:")
    add("  %finished = load atomic i64, i64* %done acquire, align 8")
    add("  %all = icmp uge i64 %finished, %parts\n  br i1 %all, label %release, label %waitmore")
    add("waitmore:")
    add("  call void @llvm.x86.sse2.pause()\n  %w1 = call i64 @llvm.readcyclecounter()\n  %wt = sub i64 %w1, %w0")
    add("  %long = icmp ugt i64 %wt, %ylimit\n  br i1 %long, label %yield, label %waitloop")
    add("yield:\n  store atomic i64 1, i64* %contended monotonic, align 8")
    add(f"  %y = call i64 (i64, ...) @syscall(i64 {_SYS_YIELD})\n  br label %waitloop")
    add("release:\n  store atomic i64 0, i64* %owner release, align 8\n  br label %exit")
    add("exit:\n  ret void\n}")

    # --- a worker: spin, claim, run; sleep when idle or parked; rest when it finds it lost its core
    add("define void @pool_worker(i64* %s) {\nentry:")
    fields()
    add("  %timespec = bitcast i64* %rests to i8*\n  br label %idle")
    add("idle:")
    add("  %slimit = load i64, i64* %spinw\n  %jlimit = load i64, i64* %jumpw")
    add("  %i0 = call i64 @llvm.readcyclecounter()\n  br label %spin")
    add("spin:\n  %prev = phi i64 [%i0, %idle], [%i1, %still]")
    add("  %stopped = load atomic i64, i64* %stop monotonic, align 8")
    add("  %halt = icmp ne i64 %stopped, 0\n  br i1 %halt, label %exit, label %look")
    add("look:\n  %t = load atomic i64, i64* %ticket acquire, align 8")
    unclaimed("work", "%t")
    add("  br i1 %work, label %claim, label %nowork")
    add("nowork:")
    add("  call void @llvm.x86.sse2.pause()\n  %i1 = call i64 @llvm.readcyclecounter()")
    add(
        "  %gap = sub i64 %i1, %prev\n  %jumped = icmp ugt i64 %gap, %jlimit\n  br i1 %jumped, label %resting, label %still"
    )
    add("still:\n  %it = sub i64 %i1, %i0\n  %tired = icmp ugt i64 %it, %slimit")
    add("  %parking = load atomic i64, i64* %park monotonic, align 8\n  %parked = icmp ne i64 %parking, 0")
    add("  %quit = or i1 %tired, %parked\n  br i1 %quit, label %sleep, label %spin")
    add("claim:")
    add("  %got = atomicrmw add i64* %ticket, i64 1 acq_rel")
    unclaimed("mine", "%got")
    add("  br i1 %mine, label %part, label %idle")
    add("part:")
    add("  %fn = load i64, i64* %fnw\n  %base = load i64, i64* %basew\n  %stride = load i64, i64* %stridew")
    run_part("w", "%minei", "%fn", "%base", "%stride")
    add("  %d = atomicrmw add i64* %done, i64 1 release")
    add("  %told = load atomic i64, i64* %contended monotonic, align 8\n  %lost = icmp ne i64 %told, 0")
    add("  br i1 %lost, label %resting, label %claim")
    add("sleep:")
    add("  %z = atomicrmw add i64* %sleepers, i64 1 seq_cst")
    add("  %again = load atomic i64, i64* %ticket seq_cst, align 8")
    unclaimed("awork", "%again")
    add("  %astop = load atomic i64, i64* %stop seq_cst, align 8\n  %astopped = icmp ne i64 %astop, 0")
    add("  %skip = or i1 %awork, %astopped\n  br i1 %skip, label %awake, label %block")
    add("block:\n  %g64 = lshr i64 %again, 32\n  %g = trunc i64 %g64 to i32")
    add(f"  %r = call i64 (i64, ...) @syscall(i64 {_SYS_FUTEX}, i32* %gen32, i32 {_FUTEX_WAIT}, i32 %g, i8* null)")
    add("  br label %awake")
    add("awake:\n  %z2 = atomicrmw sub i64* %sleepers, i64 1 seq_cst\n  br label %idle")
    # resting: not woken by jobs (the caller runs their parts), only by the timeout or a stop
    add("resting:\n  store atomic i64 0, i64* %contended monotonic, align 8")
    add(
        f"  %rr = call i64 (i64, ...) @syscall(i64 {_SYS_FUTEX}, i32* %rest32, i32 {_FUTEX_WAIT}, i32 0, i8* %timespec)"
    )
    add("  br label %idle")
    add("exit:\n  ret void\n}")
    return "\n".join(lines)


def supported() -> bool:
    """Whether this process can run workers: x86-64 Linux with llvmlite."""
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64") and llvm_jit.usable()


def _functions() -> tuple[Any, Any, Any]:
    ptr = ctypes.c_void_p
    run = llvm_jit.function("pool_run", _ir, ctypes.CFUNCTYPE(None, ptr, ptr), module="pool")
    worker = llvm_jit.function("pool_worker", _ir, ctypes.CFUNCTYPE(None, ptr), module="pool")
    clock = llvm_jit.function("pool_clock", _ir, ctypes.CFUNCTYPE(ctypes.c_int64), module="pool")
    return run, worker, clock


def _cycles_per_us(clock: Any) -> float:
    """The cycle counter's rate, measured over 2 ms."""
    c0, t0 = clock(), time.perf_counter_ns()
    time.sleep(0.002)
    c1, t1 = clock(), time.perf_counter_ns()
    return max((c1 - c0) / max((t1 - t0) / 1000, 1.0), 1.0)


class Pool:
    """The process's workers and the state they share (one per process: :func:`pool`)."""

    def __init__(self) -> None:
        self.run_fn, self.worker_fn, clock = _functions()
        raw = np.zeros(_WORDS + 8, np.int64)
        start = (-raw.ctypes.data % 64) // 8
        self.state = raw[start : start + _WORDS]
        rate = _cycles_per_us(clock)
        self.state[_SPIN] = int(SPIN_US * rate)
        self.state[_YIELD] = int(YIELD_US * rate)
        self.state[_JUMP] = int(JUMP_US * rate)
        self.state[_REST_S], self.state[_REST_NS] = divmod(REST_MS * 1_000_000, 1_000_000_000)
        self.address = self.state.ctypes.data
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()

    @property
    def workers(self) -> int:
        """Workers running now."""
        return len(self.threads)

    def resize(self, workers: int) -> None:
        """Run ``workers`` workers (stopping the current ones first when the count changes)."""
        with self.lock:
            if workers == len(self.threads):
                return
            self._stop()
            for index in range(workers):
                thread = threading.Thread(
                    target=self.worker_fn, args=(self.address,), name=f"edgetorch-worker-{index}", daemon=True
                )
                thread.start()
                self.threads.append(thread)

    def stop(self) -> None:
        """Stop every worker (they finish the part they run)."""
        with self.lock:
            self._stop()

    def _stop(self) -> None:
        if not self.threads:
            return
        self.state[_STOP] = 1
        self.state[_REST] = 1  # a resting worker's futex no longer waits
        self.run(Job(_NOTHING, np.zeros((1, 1), np.int64), 1))  # a new generation wakes sleeping workers
        self._wake_resting()
        for thread in self.threads:
            thread.join(timeout=5)
        self.threads = []
        self.state[_STOP] = self.state[_REST] = 0

    def _wake_resting(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall(_SYS_FUTEX, ctypes.c_void_p(self.state[_REST:].ctypes.data), _FUTEX_WAKE, 2147483647, None)

    def park(self) -> None:
        """Let spinning workers sleep now, until the next job: another pool (numba's OpenMP threads) is about
        to want the cores, and a worker spinning on one would delay that pool's thread by a time slice."""
        self.state[_PARK] = 1

    def run(self, job: Job) -> None:
        """Run ``job``'s parts on this thread and the workers."""
        self.run_fn(self.address, job.address)


class Job:
    """A kernel call in parts: ``fn`` (the address of a native ``void fn(void* block)``) on each row of
    ``blocks`` (one argument block a part, int64). Keeps ``blocks`` and whatever ``keep`` holds alive."""

    __slots__ = ("address", "spec", "blocks", "keep")

    def __init__(self, fn: int, blocks: np.ndarray, parts: int, keep: tuple = ()) -> None:
        if not 1 <= parts <= min(MAX_PARTS, blocks.shape[0]):
            raise ValueError(f"a job of {parts} parts over {blocks.shape[0]} argument blocks")
        self.blocks = blocks
        self.spec = np.array([fn, blocks.ctypes.data, blocks.strides[0], parts], np.int64)
        self.address = self.spec.ctypes.data
        self.keep = keep


_NOTHING = 0  # set to a native no-op's address when the pool starts (the job that wakes workers to stop)
_pool: Pool | None = None
_pool_lock = threading.Lock()


def park() -> None:
    """:meth:`Pool.park` on the process's pool, if it has started."""
    if _pool is not None and _pool.threads:
        _pool.park()


def _noop_ir() -> str:
    return "define void @pool_noop(i8* %a) {\n  ret void\n}"


def pool(workers: int) -> Pool | None:
    """The process's pool with ``workers`` workers (started on first use), or None where not :func:`supported`."""
    global _pool, _NOTHING
    if not supported():
        return None
    with _pool_lock:
        if _pool is None:
            noop = llvm_jit.function("pool_noop", _noop_ir, ctypes.CFUNCTYPE(None, ctypes.c_void_p))
            _NOTHING = ctypes.cast(noop, ctypes.c_void_p).value or 0
            _pool = Pool()
            atexit.register(_pool.stop)
    _pool.resize(workers)
    return _pool


def _forget_in_child() -> None:
    """A forked child has none of its parent's workers: it starts its own pool when it needs one."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_in_child)
