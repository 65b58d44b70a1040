"""edgetorch and the real ExecuTorch lower models in one process, whichever of them is imported first.

Both define the ``dim_order_ops`` operator library (and any other namespace in
``edgetorch.exir.dialects.shared_library.SHARED_LIBRARIES``). Each order runs in a fresh process
(``tests/interop/import_order_worker.py``), since the first import in a process decides who defines the
ops. Every program made there must run: edgetorch's on our runtime and on ExecuTorch's, ExecuTorch's on
both too, all matching eager, and every program must name ExecuTorch's operators.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime
from tests.oracle import assert_close, run_executorch

_ROOT = Path(__file__).resolve().parents[2]


def _lower_in_fresh_process(order: str, folder: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.interop.import_order_worker", order, str(folder)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=_ROOT,
        env=env,
    )
    assert proc.returncode == 0, f"lowering with {order} failed:\n{proc.stderr[-4000:]}"
    return json.loads(folder.joinpath("report.json").read_text())


def _operators(pte: bytes) -> set[str]:
    return {op.name for plan in load_pte(pte).program.execution_plan for op in plan.operators}


@pytest.mark.parametrize("order", ["edgetorch-first", "executorch-first"])
def test_both_stacks_in_one_process(order, tmp_path):
    report = _lower_in_fresh_process(order, tmp_path)
    namespaces = set(report["owners"]["edgetorch lowered"])
    assert "dim_order_ops" in namespaces
    if order == "edgetorch-first":
        assert all(report["owners"]["edgetorch lowered"].values()), "edgetorch should have defined its ops itself"
        assert not any(report["owners"]["executorch imported"].values()), "ExecuTorch's definitions should be live"
    else:
        assert not any(report["owners"]["edgetorch lowered"].values()), "edgetorch should reuse ExecuTorch's ops"
    with np.load(tmp_path / "inputs.npz") as saved:
        inputs = [saved[k] for k in saved.files]
    with np.load(tmp_path / "eager.npz") as saved:
        want = [saved[k] for k in saved.files]
    assert len(report["programs"]) == (7 if order == "edgetorch-first" else 4)
    for label in report["programs"]:
        pte = tmp_path.joinpath(f"{label}.pte").read_bytes()
        for ns in namespaces:
            assert any(name.startswith(f"{ns}::") for name in _operators(pte)), f"{label} names no {ns} op"
        got = Runtime.get().load_program(pte).load_method("forward").execute(inputs)
        assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert_close(run_executorch(pte, inputs), want, rtol=1e-5, atol=1e-5)
