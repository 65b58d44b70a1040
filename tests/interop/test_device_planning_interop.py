"""Device-planned programs with the real ExecuTorch: the ``et_copy`` operators both stacks define, in either
import order (each in a fresh process), and ExecuTorch's runtime on a program of ours with a device arena."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("executorch")

_ROOT = Path(__file__).resolve().parents[2]

_LOWER = """
import torch
from tests.exir.test_device_planning import _lower, _plan
plan = _plan(_lower(enable_non_cpu_memory_planning=True))
assert "et_copy::_h2d_copy" in [op.name for op in plan.operators], plan.operators
"""


def _run(script: str) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=600, cwd=_ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_edgetorch_first_then_executorch_takes_over_et_copy():
    _run(
        _LOWER
        + """
from edgetorch.exir.dialects.shared_library import SHARED_LIBRARIES
assert SHARED_LIBRARIES["et_copy"].defined_by_edgetorch
import executorch.exir  # defines et_copy itself: edgetorch must have handed it over
assert not SHARED_LIBRARIES["et_copy"].defined_by_edgetorch
assert torch.equal(torch.ops.et_copy._h2d_copy.default(torch.ones(2)), torch.ones(2))
"""
        + _LOWER
    )


def test_executorch_first_edgetorch_uses_its_et_copy():
    _run(
        """
import executorch.exir  # noqa: F401
"""
        + _LOWER
        + """
from edgetorch.exir.dialects.shared_library import SHARED_LIBRARIES
assert not SHARED_LIBRARIES["et_copy"].defined_by_edgetorch
"""
    )


def test_executorch_runs_the_host_method_of_a_device_planned_program():
    from edgetorch.exir import ExecutorchBackendConfig, to_edge
    from tests.exir.test_device_planning import ARGS, AddsOnDevice, AddThenScale
    from tests.oracle import run_executorch

    eps = {name: torch.export.export(AddThenScale(), ARGS) for name in ("host", "device")}
    pte = (
        to_edge(eps)
        .to_backend({"device": AddsOnDevice()})
        .to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True))
        .buffer
    )
    got = run_executorch(pte, [a.numpy() for a in ARGS], method="host")
    np.testing.assert_array_equal(got[0], AddThenScale()(*ARGS).numpy())
