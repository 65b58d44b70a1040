"""The conftest.py that bench/upstream_suite.py puts beside ExecuTorch's copied test files.

It does three things for one pytest run of one upstream test file:

* records every test's outcome as one JSON line in ``$UPSTREAM_RECORD`` as soon as it is known, so a
  file that times out or crashes still leaves the outcomes of the tests that finished;
* seeds torch per test from a hash of the test's id (as ExecuTorch's own root conftest does), so a
  test draws the same random inputs in both runs;
* in the edgetorch run (``$UPSTREAM_HELPERS`` set), serves ExecuTorch's test helpers (the shared
  models, the XNNPACK ``Tester``, ``inspector_test_utils``, ...: every module under a ``test``/``tests``/``examples``
  directory), rewritten to import ``edgetorch.``, from a directory kept apart from the package, as
  ``edgetorch.<their path>``, but only where the edgetorch checkout has no module of that name; and
  refuses ``import executorch`` so no test can pass on ExecuTorch's code by accident.

It imports only the standard library until a test runs.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.util
import json
import os
import sys

HELPER_DIRS = {"test", "tests", "testing", "examples"}


class _NoExecuTorch(importlib.abc.MetaPathFinder):
    """Makes ``import executorch`` fail in the edgetorch run, whoever asks."""

    def find_spec(self, fullname, path, target=None):
        if fullname == "executorch" or fullname.startswith("executorch."):
            raise ModuleNotFoundError(f"No module named '{fullname}' (executorch is blocked in the edgetorch run)")
        return None


class _UpstreamHelpers(importlib.abc.MetaPathFinder):
    """Finds ``edgetorch.<path>`` in the rewritten helper tree when the checkout itself has no such module.

    Placed last on ``sys.meta_path``, so the checkout's own modules always win. Only paths inside a
    test directory or named like a test module, and packages that hold nothing but such modules, are
    served: a missing product module stays missing.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path, target=None):
        parts = fullname.split(".")
        if parts[0] != "edgetorch" or len(parts) < 2:
            return None
        rel = parts[1:]
        base = os.path.join(self.root, *rel)
        if not (HELPER_DIRS & set(rel[:-1]) or _helper_name(rel[-1]) or _holds_only_helpers(base)):
            return None
        if os.path.isdir(base):
            return importlib.util.spec_from_file_location(
                fullname, os.path.join(base, "__init__.py"), submodule_search_locations=[base]
            )
        if os.path.isfile(base + ".py"):
            return importlib.util.spec_from_file_location(fullname, base + ".py")
        return None


def _holds_only_helpers(directory: str) -> bool:
    """A package directory of the helper tree that exists only to hold helpers (``bundled_program/util`` with its
    ``test_util.py``): its ``__init__`` is the empty one the harness made, so serving it adds no product name."""
    if not os.path.isdir(directory):
        return False
    init = os.path.join(directory, "__init__.py")
    if os.path.exists(init) and os.path.getsize(init) > 0:
        return False
    names = [n.removesuffix(".py") for n in os.listdir(directory) if n != "__init__.py" and n != "__pycache__"]
    return bool(names) and all(_helper_name(n) for n in names)


def _helper_name(stem: str) -> bool:
    return stem in HELPER_DIRS or stem.startswith("test_") or stem.endswith(("_test", "_test_utils"))


def _install_helpers() -> None:
    root = os.environ.get("UPSTREAM_HELPERS")
    if not root:
        return
    # The shared venv's editable install of edgetorch must not stand in for the checkout under test.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
    sys.meta_path.insert(0, _NoExecuTorch())
    sys.meta_path.append(_UpstreamHelpers(root))


_install_helpers()
_outcomes: dict[str, dict] = {}


def _write(record: dict) -> None:
    path = os.environ.get("UPSTREAM_RECORD")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _failure(report) -> dict:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = report.longreprtext if hasattr(report, "longreprtext") else str(report.longrepr)
    return {"message": getattr(crash, "message", "") or "", "text": text[-6000:]}


def pytest_sessionstart(session):
    if os.environ.get("UPSTREAM_HELPERS"):
        import edgetorch

        _write({"edgetorch": edgetorch.__file__})


def pytest_collectreport(report):
    if report.failed:
        _write({"collect": report.nodeid, **_failure(report)})


def pytest_runtest_setup(item):
    import torch

    torch.manual_seed(int(hashlib.sha256(item.nodeid.encode()).hexdigest(), 16) % (2**32))


def pytest_runtest_logreport(report):
    state = _outcomes.setdefault(report.nodeid, {"test": report.nodeid, "outcome": "passed"})
    if report.failed and state["outcome"] != "failed":
        state.update(outcome="failed", phase=report.when, **_failure(report))
    elif report.skipped and state["outcome"] == "passed":
        state["outcome"] = "skipped"
    if report.when == "teardown":
        _write(_outcomes.pop(report.nodeid))
