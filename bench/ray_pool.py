"""Spread a bench sweep's cases over Ray workers, one Ray task per case, a dead worker costing its case only.

The long sweeps (bench/opinfo_compare.py, bench/fuzz.py) call :func:`start` and then :func:`run_isolated`
with a function and the cases; each case is a Ray task with no retry, so a case that kills its worker
(segfault, abort, out of memory) comes back as :class:`Crashed` and the other cases go on, on a new worker.
Ray runs local (``num_cpus`` = the number of workers, no dashboard) unless an ``address`` names a cluster;
the workers import bench/ and edgetorch/ from this checkout (``PYTHONPATH`` in their runtime environment), so
a remote cluster needs the same checkout at the same path.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


@dataclass
class Crashed:
    """The worker running a case died before answering."""

    reason: str


def start(address: str | None = None, workers: int = 2) -> Any:
    """Connect to the Ray cluster at ``address``, or start a local one with ``workers`` CPUs; returns ``ray``."""
    try:
        import ray
    except ImportError:
        raise SystemExit(
            "--ray needs Ray: expected `import ray` to work, found it missing; pip install 'ray[data]'"
        ) from None
    env = {"env_vars": {"PYTHONPATH": str(ROOT)}}
    if address:
        ray.init(address=address, runtime_env=env, log_to_driver=False)
    else:
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, runtime_env=env)
    return ray


def run_isolated(fn: Callable[..., Any], cases: Iterable[tuple], num_cpus: float = 1) -> list[Any]:
    """``fn(*case)`` for every case on Ray workers, in the cases' order; a case whose worker died gives
    :class:`Crashed`. An exception ``fn`` raises is a bug of the sweep, not of the case, and is raised here."""
    return [wait() for wait in submit_isolated(fn, cases, num_cpus)]


def submit_isolated(fn: Callable[..., Any], cases: Iterable[tuple], num_cpus: float = 1) -> list[Callable[[], Any]]:
    """Like :func:`run_isolated` but returns at once: one callable per case that waits for its result."""
    import ray
    from ray import exceptions

    task = ray.remote(num_cpus=num_cpus, max_retries=0)(fn)
    refs = [task.remote(*case) for case in cases]
    return [lambda ref=ref: _get(ray, exceptions, ref) for ref in refs]


def _get(ray: Any, exceptions: Any, ref: Any) -> Any:
    try:
        return ray.get(ref)
    except exceptions.RayTaskError:
        raise
    except exceptions.RayError as e:  # WorkerCrashedError, OutOfMemoryError, NodeDiedError, ...
        return Crashed(f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}")
