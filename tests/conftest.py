"""Suite-wide setup. There is no known-failure list: a failing test is fixed, not marked.

Tests marked ``@pytest.mark.slow`` (long sweeps, real pretrained models) run only with ``--slow`` (or
``EDGETORCH_SLOW=1``), so that the default suite stays within CI's ten minutes on two cores;
``bash scripts/test.sh --slow`` runs everything.
"""

import os

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
    if config.getoption("--slow") or os.environ.get("EDGETORCH_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow test: run with --slow or EDGETORCH_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


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
