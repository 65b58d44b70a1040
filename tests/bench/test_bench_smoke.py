"""Smoke test of the benchmark suite: the MLP, one timed run per contender, into a temporary folder.

Checks that every contender ran and matched eager, and that the report has
every column and both plots. No timing assertions.
"""

import json
import pathlib
import subprocess
import sys

import pytest

from bench.plots import COMPARISONS, CONTENDERS, LABELS, comparison_label
from edgetorch.cli.bench import BENCHMARKS, bench_script

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow  # 30-40 s: the whole bench suite (six contenders) on the MLP; run with --slow
def test_suite_on_mlp(tmp_path):
    cmd = [sys.executable, str(ROOT / "bench" / "suite.py"), "--models", "mlp", "--quick", "--footprint-repeats", "0"]
    done = subprocess.run([*cmd, "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    results = json.loads((tmp_path / "results" / "suite.json").read_text())
    mlp = results["models"]["mlp"]
    assert mlp["errors"] == {}
    assert set(mlp["latency_ms"]) == set(CONTENDERS)
    assert all(mlp["max_err"][c] < 1e-4 for c in CONTENDERS), mlp["max_err"]
    compilers = set(CONTENDERS) - {"eager"}
    assert set(mlp["export_s"]) == compilers and all(mlp["bytes"][c] > 3_000_000 for c in compilers)

    report = (tmp_path / "RESULTS.md").read_text()
    latency_header = next(line for line in report.splitlines() if line.startswith("| model") and " ms " in line)
    assert all(f"{LABELS[c]} ms" in latency_header for c in CONTENDERS), latency_header
    assert all(comparison_label(ours, theirs) in report for ours, theirs in COMPARISONS)
    assert "**geomean**" in report
    for png in ("latency.png", "ratios.png"):
        assert (tmp_path / "results" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_command_finds_every_script():
    assert all(bench_script(name).is_file() for name in BENCHMARKS)
    with pytest.raises(FileNotFoundError, match="source checkout"):
        bench_script("no_such_benchmark")
