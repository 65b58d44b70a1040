"""The edgetorch command: export, inspect, run; one-line errors with exit code 1."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

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
    env = dict(os.environ, EDGETORCH_TUNE="1", EDGETORCH_CACHE_DIR=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "edgetorch", "inspect", str(pte), "--kernels"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and "kernels: compiled tier" in r.stdout, r.stderr[-2000:]
    if "compiled tier on" in r.stdout:  # the two linear layers choose between the packed GEMM and sgemm
        from edgetorch.runtime.kernels import gemm

        names = "|".join(gemm.linear_kernels())  # the host's candidates (packed16 only where it has AVX-512)
        assert len(re.findall(rf"instruction \d+: gemm 3x(4x8|8x2) -> ({names}) \(measured: ", r.stdout)) == 2
        assert (tmp_path / "cache" / "kernels.json").exists()
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


QUANT_FACTORY = """
import torch
def make():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    return m, (torch.randn(4, 64),)
def calibration():
    torch.manual_seed(1)
    return [(torch.randn(4, 64),) for _ in range(3)]
"""


@pytest.mark.parametrize(
    ("scheme", "extra", "min_sqnr"),
    [("int8", ("--calibration", "{model}:calibration"), 25), ("int8-dynamic", (), 25), ("8da4w", (), 12)],
)
def test_export_quantized(tmp_path, scheme, extra, min_sqnr):
    import torch

    model_py = tmp_path / "model.py"
    model_py.write_text(QUANT_FACTORY)
    pte = tmp_path / "q.pte"
    extra = [a.format(model=model_py) for a in extra]
    r = _cli("export", f"{model_py}:make", "-o", str(pte), "--backend", "xnnpack", "--quantize", scheme, *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"{scheme} quantization" in r.stdout
    # The whole quantized graph is one XNNPACK delegate: no fallback to portable quantize/dequantize kernels.
    assert "could not lower" not in r.stdout and "operators (2 calls): executorch_call_delegate x1" in r.stdout
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(5))
    np.save(tmp_path / "x.npy", x.numpy())
    r = _cli("run", str(pte), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y"))
    assert r.returncode == 0, r.stderr[-2000:]
    exec(QUANT_FACTORY, ns := {})
    model, _ = ns["make"]()
    want = model(x).detach().numpy().astype(np.float64)
    got = np.load(tmp_path / "y_0.npy").astype(np.float64)
    assert 20 * np.log10(np.linalg.norm(want) / np.linalg.norm(want - got)) > min_sqnr


def test_export_quantize_errors(tmp_path):
    (tmp_path / "model.py").write_text(QUANT_FACTORY)
    out = str(tmp_path / "x.pte")
    r = _cli("export", f"{tmp_path / 'model.py'}:make", "-o", out, "--quantize", "int8")
    assert r.returncode == 1 and "--backend xnnpack" in r.stderr
    r = _cli(
        "export",
        f"{tmp_path / 'model.py'}:make",
        "-o",
        out,
        "--backend",
        "xnnpack",
        "--quantize",
        "8da4w",
        "--group-size",
        "48",
    )
    assert r.returncode == 1 and "must divide" in r.stderr


def test_threads_option_reaches_the_runtimes_kernels(set_policy):
    """``edgetorch llm run --threads N`` / ``asr run --threads N``: the runtime's own kernels run on N threads,
    not only BLAS (before, ``--threads 1`` left the compiled kernels splitting over every core)."""
    from edgetorch.cli.llm import limit_threads
    from edgetorch.runtime import get_num_threads

    set_policy(threads=None)
    limit_threads(1)
    assert get_num_threads() == 1
    limit_threads(2)
    assert get_num_threads() == 2
