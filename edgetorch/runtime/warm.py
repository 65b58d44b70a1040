"""The fast tier's first run of a program on a machine: numba compiles the kernels the program uses once and
keeps them on disk, which takes seconds to over a minute (a vision model's fused blocks and split variants).
Rather than stall that first run, the runtime starts the compile in a background process and runs the first
process on the NumPy tier; the processes after it load the compiled kernels from numba's cache.

Whether a program is compiled here is a marker file, ``compiled/KEY.json`` in the tuning cache's directory
(runtime/tuning.py: ``EDGETORCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/edgetorch``, else ``~/.cache/edgetorch``).
The key covers the program file and its data files (real path, size, modification time), the host
(``tuning.host()``: CPU model, ISA flags, the versions of edgetorch, NumPy, numba and llvmlite) and the kernels'
sources (the newest modification time under edgetorch's runtime and backends, which numba's cache also
follows). While a background compile runs, ``compiled/KEY.lock`` holds its process id.

:func:`start`, when a program is loaded from a file:

- marker ``done``: nothing to do, the compiled kernels load from disk;
- no marker and no live compile: starts a Python process running :func:`main` on the program (at a lower
  priority, its output in ``compiled/KEY.log``), says so on standard error, and turns the compiled tier off for
  this process;
- a compile under way (another process started it): the same, without starting a second one;
- marker ``failed``, or a lock whose process died without a marker: compiles in this process, as before.

``EDGETORCH_COMPILE=wait`` (the policy's ``compile_in_background`` off) compiles in the process that needs the
kernels, with a message while it does (compiled.py); tests and benchmarks use it. A program loaded from bytes
has no file for a background process to read and also compiles in place, as does every program off POSIX
systems. ``edgetorch warmup PROGRAM`` compiles in the foreground, ahead of time, and writes the marker too. A
process that started on the NumPy tier stays on it; the next one gets the compiled kernels.

Imports only the standard library, NumPy, the policy and tuning.py (for the cache directory and the host).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from edgetorch.runtime import policy, tuning

DONE, FAILED = "done", "failed"
_children: list[subprocess.Popen] = []  # background compiles this process started (kept so they are reaped)
_told = False


def start(program: str | os.PathLike, data_files: Sequence[Any] = ()) -> None:
    """Called as ``program`` (a file, with its ``data_files``) loads: leaves the compiled tier on where the
    program's kernels are compiled here (or must compile in place), else starts or joins a background compile
    and turns the tier off for this process (module docstring)."""
    mode = policy.current()
    if os.name != "posix" or not (mode.compile_in_background and policy.compiled_tier_possible()):
        return  # elsewhere os.kill(pid, 0) is no liveness check, and there is no os.nice
    if not all(isinstance(f, (str, os.PathLike)) for f in data_files):
        return
    files = [Path(os.fspath(program)), *(Path(os.fspath(f)) for f in data_files)]
    try:
        _start(files)
    except OSError:  # no cache directory to write (a read-only home): compile in place, as before
        return


def _start(files: list[Path]) -> None:
    where = marker_dir()
    key = program_key(files)
    state = _read_state(where / f"{key}.json")
    if state is not None:
        return  # done: the kernels load from disk; failed: compile here, numba's messages in view
    lock = where / f"{key}.lock"
    pid = _claim(lock)
    if pid == 0:  # ours to start
        try:
            pid = _spawn(files, key, where)
        except OSError:
            lock.unlink(missing_ok=True)
            return
        lock.write_text(str(pid))
    elif pid < 0:  # the process that held the lock died without a marker: compile here from now on
        _write_state(where / f"{key}.json", FAILED, log=str(where / f"{key}.log"), reason="the compile process died")
        lock.unlink(missing_ok=True)
        return
    policy.install(dataclasses.replace(policy.current(), compiled=False))
    _tell(files[0], pid, where / f"{key}.log")


def marker_dir() -> Path:
    """Where the markers, locks and logs of background compiles live (created if missing)."""
    where = tuning.cache_dir() / "compiled"
    where.mkdir(parents=True, exist_ok=True)
    return where


def program_key(files: Sequence[Path]) -> str:
    """The marker's name for these files (a program and its data files) on this host with these sources."""
    parts: list[Any] = [tuning.host(), _sources_stamp()]
    for f in files:
        stat = f.stat()
        parts.append([str(f.resolve()), stat.st_size, stat.st_mtime_ns])
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _sources_stamp() -> int:
    """The newest modification time of the runtime's and backends' modules (numba recompiles a kernel whose
    source file changed, so a marker written before the change no longer holds)."""
    package = Path(__file__).resolve().parents[1]
    newest = 0
    for folder in ("runtime", "backends"):
        for path in (package / folder).rglob("*.py"):
            newest = max(newest, path.stat().st_mtime_ns)
    return newest


def _read_state(path: Path) -> str | None:
    """``done`` or ``failed`` from a marker, or None when there is none (an unreadable one counts as none)."""
    try:
        state = json.loads(path.read_text()).get("state")
    except (OSError, ValueError, AttributeError):
        return None
    return state if state in (DONE, FAILED) else None


def _write_state(path: Path, state: str, **details: Any) -> None:
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"state": state, "time": time.time(), **details}))
    os.replace(partial, path)


def _claim(lock: Path) -> int:
    """0 when this process created ``lock`` (it starts the compile; the lock names this process until the
    compile's own starts); the live process id it names when another process holds it; -1 when that process is
    gone, or the lock named none for more than a minute."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        return 0
    try:
        text = lock.read_text().strip()
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return -1
    if not text.isdigit():  # just claimed, the process id not written yet
        return os.getpid() if age < 60 else -1
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return -1
    except PermissionError:
        pass  # alive, another user's
    return pid


# at a lower priority: the user's own process, on the NumPy tier meanwhile, comes first
_CHILD = "import os, sys; os.nice(10); from edgetorch.runtime import Runtime, warm; sys.exit(warm.main(Runtime.get()))"


def _spawn(files: Sequence[Path], key: str, where: Path) -> int:
    env = dict(os.environ, EDGETORCH_COMPILE="wait")
    with open(where / f"{key}.log", "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, "--key", key, *map(str, files)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # not stopped by the user's Ctrl-C on this process
        )
    _children.append(child)
    return int(child.pid)


def _tell(program: Path, pid: int, log: Path) -> None:
    global _told
    if _told:
        return
    _told = True
    print(
        f"edgetorch: the fast tier's kernels for {program.name} are not compiled on this machine yet; they are "
        f"compiling in the background (process {pid}, log {log}). This process runs the NumPy tier; the next ones "
        "start at full speed. EDGETORCH_COMPILE=wait compiles before the first run instead, and "
        "`edgetorch warmup PROGRAM` does it ahead of time.",
        file=sys.stderr,
        flush=True,
    )


# ------------------------------------------------------------------------------------------------ the compile


def warm_up(program: Any, threads: int) -> list[tuple[str, int]]:
    """Run each method of the loaded ``program`` on zeros, so that every kernel it uses is compiled: at its
    inputs' declared (largest) sizes and, where they are dynamic, at their smallest (an LLM's prefill and decode
    take different kernels), once splitting at every call site (the parallel variants) and once on one thread
    (the serial ones; at run time a site picks between the two by timing both). Returns (method, runs)."""
    done = []
    for name in sorted(program.method_names):
        method = program.load_method(name)
        shapes = (False, True) if _dynamic(method.metadata) else (False,)
        for variant in (dict(threads=max(2, threads), split_adapts=False), dict(threads=1)):
            with policy.using(**variant):
                for smallest in shapes:
                    method.execute(_zeros(method.metadata, smallest))
        done.append((name, 2 * len(shapes)))
    return done


def mark_done(files: Sequence[str | os.PathLike], seconds: float) -> None:
    """Record that the kernels of the program ``files[0]`` (with its data files) are compiled on this host."""
    paths = [Path(os.fspath(f)) for f in files]
    with contextlib.suppress(OSError):
        _write_state(marker_dir() / f"{program_key(paths)}.json", DONE, seconds=round(seconds, 1))


def _zeros(meta: Any, smallest: bool) -> list[Any]:
    """Zero inputs at their declared (upper-bound) sizes, or with every dynamic one's dimensions at 1."""
    inputs: list[Any] = []
    for i in range(meta.num_inputs()):
        info = meta.input_tensor_meta(i)
        if isinstance(info, str):
            inputs.append(0)
            continue
        sizes = tuple(info.sizes())
        inputs.append(
            np.zeros(tuple(min(d, 1) for d in sizes) if smallest and info.dynamic else sizes, info.numpy_dtype)
        )
    return inputs


def _dynamic(meta: Any) -> bool:
    infos = (meta.input_tensor_meta(i) for i in range(meta.num_inputs()))
    return any(getattr(info, "dynamic", False) for info in infos)


def main(runtime: Any, argv: Sequence[str] | None = None) -> int:
    """The background compile, in the process :func:`start` runs as ``python -c _CHILD --key KEY PROGRAM
    [DATA...]``, loading through ``runtime`` (the :class:`~edgetorch.runtime.Runtime`). Writes the marker (done or
    failed) and removes the lock, whatever happens."""
    parser = argparse.ArgumentParser(description="compile a program's fast-tier kernels (started by the runtime)")
    parser.add_argument("--key", required=True)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    where = marker_dir()
    began = time.perf_counter()
    details: dict[str, Any]
    try:
        program = runtime.load_program(args.files[0], data_files=args.files[1:])
        for name, runs in warm_up(program, policy.current().thread_count()):
            print(f"{args.files[0]} {name}: ran {runs} times", flush=True)
        state, details = DONE, {"seconds": round(time.perf_counter() - began, 1)}
    except Exception as e:  # recorded for the next process, which then compiles in place
        state, details = FAILED, {"reason": f"{type(e).__name__}: {e}"}
    try:
        _write_state(where / f"{args.key}.json", state, **details)
    finally:  # the marker first: between the two, another process would start a second compile
        (where / f"{args.key}.lock").unlink(missing_ok=True)
    print(f"{state} in {time.perf_counter() - began:.1f} s: {details}", flush=True)
    return 0 if state == DONE else 1
