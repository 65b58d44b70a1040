"""The runtime asks numba's OpenMP threads to sleep rather than spin while they wait (a spinning thread waiting
for a descheduled peer made 2-thread runs far slower than 1-thread ones on a busy machine), unless the user set
an OpenMP wait policy of their own."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from edgetorch.runtime import policy

_READ = "import edgetorch.runtime, os; print(os.environ.get('GOMP_SPINCOUNT'))"


def _spin_count(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", _READ], env={**base, **env}, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_set_when_the_user_chose_nothing():

    assert _spin_count() == str(policy.SPIN_COUNT)


@pytest.mark.parametrize("env", [{"GOMP_SPINCOUNT": "12345"}, {"OMP_WAIT_POLICY": "active"}])
def test_the_users_policy_is_kept(env):
    assert _spin_count(**env) == env.get("GOMP_SPINCOUNT", "None")


def test_a_split_before_numba_names_its_threading_layer(monkeypatch, kernel_threads):
    """numba.threading_layer() raises until numba has started a layer; a split that asks too early (seen
    intermittently in the XNNPACK delegate) runs its parallel form and asks again next time."""
    numba = pytest.importorskip("numba")
    from edgetorch.runtime.kernels import compiled

    def not_yet():
        raise ValueError("Threading layer is not initialized.")

    monkeypatch.setattr(numba, "threading_layer", not_yet)
    monkeypatch.setattr(compiled, "SPLITS", None)
    kernel_threads(2)
    ran = []
    compiled.split(lambda: ran.append("serial"), ran.append, 4)
    assert ran == [2] and compiled.SPLITS is None


# A parallel loop run once, after the runtime has set up its compiled tier (and loaded TBB, where installed).
_LOOP = (
    "import os, numpy as np\n"
    "from edgetorch.runtime import policy\n"
    "assert policy.compiled_tier()\n"
    "import numba\n"
    "@numba.njit(parallel=True)\n"
    "def f(a):\n"
    "    for i in numba.prange(a.shape[0]):\n"
    "        a[i] += 1\n"
    "a = np.zeros(64)\n"
    "f(a)\n"
)
_LAYER = _LOOP + "print(numba.threading_layer())\n"
# Then a fork whose child runs the loop again: prints the child's exit code.
_FORK = _LOOP + (
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    f(a)\n"
    "    os._exit(0 if a.sum() == 128 else 3)\n"
    "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
)


def _last_line(code: str, **env: str) -> str:
    """The last line ``code`` prints in a fresh process (without the caller's NUMBA_THREADING_LAYER)."""
    base = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def _tbb_installed() -> bool:
    try:
        import importlib.metadata

        importlib.metadata.distribution("tbb")
    except importlib.metadata.PackageNotFoundError:
        return False
    return sys.platform == "linux" and policy.compiled_tier()


@pytest.mark.skipif(not _tbb_installed(), reason="needs numba and the tbb wheel (edgetorch[fast]) on Linux")
def test_numba_runs_on_tbb_when_the_wheel_is_installed():
    """pip puts TBB's library in the environment's lib/, where the loader does not look: the runtime loads it
    before numba starts a threading layer, so numba's parallel loops run on TBB."""
    assert _last_line(_LAYER) == "tbb"


@pytest.mark.skipif(not _tbb_installed(), reason="needs numba and the tbb wheel (edgetorch[fast]) on Linux")
def test_the_users_threading_layer_is_kept():
    assert _last_line(_LAYER, NUMBA_THREADING_LAYER="workqueue") == "workqueue"


@pytest.mark.skipif(not _tbb_installed(), reason="needs numba and the tbb wheel (edgetorch[fast]) on Linux")
def test_a_forked_child_runs_parallel_loops():
    """On TBB a process that ran parallel loops may fork and the child run them too (on GNU OpenMP, numba's
    other layer, the child is terminated: "fork() called from a process already using GNU OpenMP")."""
    assert _last_line(_FORK) == "0"
