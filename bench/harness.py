"""Shared benchmark plumbing: clean BLAS environment, timing, tables.

Benchmarks unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE for their own process
(this machine sets them and they slow NumPy's BLAS); tests never do.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

# A benchmark times the fast tier, never the NumPy tier a process runs while a background process compiles its
# program's kernels (runtime/warm.py): kernels compile in the process that needs them, before any timing. The
# child processes benchmarks start inherit it.
os.environ.setdefault("EDGETORCH_COMPILE", "wait")


def reexec_with_clean_blas_env() -> None:
    """Restart this script without the BLAS-slowing variables, before NumPy is imported."""
    if any(v in os.environ for v in _SLOW_BLAS_VARS):
        env = {k: v for k, v in os.environ.items() if k not in _SLOW_BLAS_VARS}
        print(f"[bench] unsetting {', '.join(_SLOW_BLAS_VARS)} for this benchmark process", flush=True)
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def set_threads(n: int, with_torch: bool = True) -> None:
    """Pin BLAS, our runtime's threaded kernels (``edgetorch.runtime.set_num_threads``) and torch (unless
    ``with_torch`` is False: a torch-free contender such as our runtime must not import it, or its peak memory
    would count torch) to ``n`` threads so every contender runs on the same cores.

    ``threadpool_limits`` only reaches libraries already loaded, so NumPy (OpenBLAS) and torch (its OpenMP
    and BLAS) are imported first; called before them, the limit silently missed NumPy's BLAS.
    """
    import numpy  # noqa: F401  loads OpenBLAS, so that the limit below reaches it
    from threadpoolctl import threadpool_limits

    if with_torch:
        import torch

        torch.set_num_threads(n)
    threadpool_limits(n)
    from edgetorch.runtime import set_num_threads

    set_num_threads(n)


def median_time(fn: Callable[[], object], min_runs: int = 5, budget_s: float = 10.0, warmup: int = 1) -> float:
    """Median wall seconds of ``fn()`` over at least ``min_runs`` runs (fewer if one run exceeds the budget)."""
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        if time.perf_counter() - t0 > budget_s:
            return time.perf_counter() - t0
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < min_runs or (time.perf_counter() - start < budget_s / 4 and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return statistics.median(times)


def fmt_ms(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 10 else f"{ms:.1f}"


def fmt_bytes(n: int | None) -> str:
    """Bytes exactly below 10 KB, then KB below a megabyte, else MB (decimal units); "-" when unknown."""
    if n is None:
        return "-"
    if n < 10_000:
        return f"{n} B"
    return f"{n / 1e3:.1f} KB" if n < 1e6 else f"{n / 1e6:.2f} MB"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A GitHub-markdown table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


KEEP_BELOW = "<!-- generated above; notes below this line are kept when the benchmark rewrites its section -->"


def replace_section(path, heading: str, body: str) -> None:
    """Replace the ``heading`` (``## ...``) section of the markdown file ``path`` with ``body``, keeping every
    other section; appended if absent. ``body`` ends with :data:`KEEP_BELOW`, and whatever followed that
    line in the old section (hand-written notes, ``###`` subsections) is kept after the new body."""
    from pathlib import Path

    path = Path(path)
    text = path.read_text() if path.exists() else "# edgetorch benchmark results\n"
    body = body.rstrip("\n")
    if not body.endswith(KEEP_BELOW):
        body += "\n\n" + KEEP_BELOW
    start = text.find(heading + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    else:
        end = text.find("\n## ", start + len(heading))
        old = text[start:] if end < 0 else text[start:end]
        mark = old.find(KEEP_BELOW)
        notes = old[mark + len(KEEP_BELOW) :].strip("\n") if mark >= 0 else ""
        text = text[:start] + body + ("\n\n" + notes if notes else "") + "\n" + ("" if end < 0 else text[end:])
    path.write_text(text.rstrip("\n") + "\n")


def module_at(rev: str, path: str, replace: Mapping[str, str] | None = None) -> types.ModuleType:
    """The module at ``path`` (from the repository root) as of git revision ``rev``, for same-run A/B timing:
    executed under a name of its own from a file of its own (so that numba caches its kernels apart from the
    current ones), after the textual ``replace`` edits of its source."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True)
    text = source.stdout
    for old, new in (replace or {}).items():
        text = text.replace(old, new)
    copy = Path(tempfile.gettempdir()) / "edgetorch_bench_revisions" / rev / path
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text)
    module = types.ModuleType(f"{Path(path).stem}_at_{rev}")
    module.__file__ = str(copy)
    sys.modules[module.__name__] = module
    exec(compile(text, str(copy), "exec"), module.__dict__)
    return module
