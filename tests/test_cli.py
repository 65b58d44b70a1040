"""The edgetorch command: export, inspect, run; one-line errors with exit code 1."""

import re
import subprocess
import sys

import numpy as np

FACTORY = """
import torch
def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return m, (torch.randn(3, 4),)
"""


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "edgetorch", *args], capture_output=True, text=True, timeout=300)


def test_export_inspect_run(tmp_path):
    (tmp_path / "model.py").write_text(FACTORY)
    pte = tmp_path / "m.pte"
    r = _cli("export", f"{tmp_path / 'model.py'}:make", "-o", str(pte))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "addmm x2" in r.stdout and "file size" in r.stdout
    r = _cli("inspect", str(pte))
    assert r.returncode == 0 and "aten::addmm.out" in r.stdout and "planned memory id 1" in r.stdout
    r = _cli("inspect", str(pte), "--instructions")
    assert r.returncode == 0 and re.search(r"\n +0  %\d+ = aten::\w+\.out\(.*\)  \[arena 1 @ \d+, ", r.stdout), r.stdout
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    r = _cli("run", str(pte), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y"))
    assert r.returncode == 0, r.stderr
    assert "output 0: shape=[3, 2] dtype=float32" in r.stdout and "latency" in r.stdout
    import torch

    exec(FACTORY, ns := {})
    model, _ = ns["make"]()
    want = model(torch.ones(3, 4)).detach().numpy()
    np.testing.assert_allclose(np.load(tmp_path / "y_0.npy"), want, rtol=1e-5, atol=1e-6)


def test_errors_are_one_line(tmp_path):
    r = _cli("run", str(tmp_path / "missing.pte"))
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "ProgramLoadError" in r.stderr
    (tmp_path / "junk.pte").write_bytes(b"not a program at all")
    r = _cli("inspect", str(tmp_path / "junk.pte"))
    assert r.returncode == 1 and "not an ExecuTorch program" in r.stderr
    r = _cli("export", "nofile.py:make", "-o", str(tmp_path / "x.pte"))
    assert r.returncode == 1 and "is not a file" in r.stderr
