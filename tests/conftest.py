"""Suite-wide setup. There is no known-failure list: a failing test is fixed, not marked.

Tests marked ``@pytest.mark.slow`` (long sweeps, real pretrained models) run only with ``--slow`` (or
``EDGETORCH_SLOW=1``), so that the default suite stays within CI's ten minutes on two cores;
``bash scripts/test.sh --slow`` runs everything.
"""

import json
import os
from pathlib import Path

import pytest

# Kernel choice by timing (runtime/tuning.py) stays off in tests, so results never depend on the host's
# timings; tests of tuning turn it on with their own cache directory.
os.environ.setdefault("EDGETORCH_TUNE", "0")
# The fast tier compiles in the process that loads a program (not in a background process while this one runs the
# NumPy tier, runtime/warm.py), so that tests of compiled kernels run them; tests/runtime/test_warm.py tests the
# background start with its own cache directory.
os.environ.setdefault("EDGETORCH_COMPILE", "wait")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test, run with --slow or EDGETORCH_SLOW=1")


def pytest_collection_modifyitems(config, items):
    _longest_files_first(config, items)
    if config.getoption("--slow") or os.environ.get("EDGETORCH_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow test: run with --slow or EDGETORCH_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def _longest_files_first(config, items) -> None:
    """Order the files by the seconds they took in a recorded run (tests/file_seconds.json, written by
    scripts/test_file_seconds.py), longest first, each file's tests in their own order. pytest-xdist with
    ``--dist loadfile --no-loadscope-reorder`` (scripts/test.sh) then hands the long files out first, so that
    the workers finish together; its own order (most tests first) left the few-test files that lower real models
    for the end, one worker busy with them while the other waited. A file not in the record counts as
    ``_UNRECORDED_SECONDS``."""
    record = Path(config.rootpath, "tests", "file_seconds.json")
    if not record.exists():
        return
    seconds = json.loads(record.read_text())
    root = Path(config.rootpath)

    def cost(item) -> float:
        path = Path(item.path)
        name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.as_posix()
        return seconds.get(name, _UNRECORDED_SECONDS)

    items[:] = sorted(items, key=lambda item: -cost(item))  # stable: a file's tests keep their order


_UNRECORDED_SECONDS = 5.0  # a new file: ahead of the many small ones, behind the known long ones


@pytest.fixture(autouse=True)
def _split_always():
    """Kernels split whenever they have threads (the runtime's default times both variants per call site and
    may run either, so a test of the parallel variant's results could silently run the serial one). The
    choice itself is tested in tests/runtime/test_split_choice.py, with ``split_adapts=True``."""
    from edgetorch.runtime import policy

    with policy.using(split_adapts=False):
        yield


@pytest.fixture
def kernel_threads():
    """``compiled.set_num_threads`` for one test; the policy in force before comes back after."""
    from edgetorch.runtime import policy
    from edgetorch.runtime.kernels import compiled

    before = policy.current()
    yield compiled.set_num_threads
    policy.install(before)


@pytest.fixture
def set_policy():
    """``set_policy(field=value, ...)`` installs the runtime policy with those changes for one test (tests
    construct policies rather than patch module globals); the policy before comes back after."""
    import dataclasses

    from edgetorch.runtime import policy

    before = policy.current()
    yield lambda **changes: policy.install(dataclasses.replace(policy.current(), **changes))
    policy.install(before)


@pytest.fixture
def hang_guard():
    """Fails a test whose run does not stop within 60 s (the executor's loop bound not enforced) instead of
    hanging the suite; a damaged loop stops in milliseconds."""
    import signal

    def expire(signum, frame):
        raise AssertionError("the run did not stop within 60 s: the loop bound is not enforced")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)
