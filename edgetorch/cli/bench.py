"""``edgetorch bench NAME [ARGS...]``: run one of the benchmark scripts of a source checkout's bench/ folder.

The benchmarks compare against ExecuTorch, ONNX Runtime and PyTorch, so they
live beside the package rather than in it; this command finds them and runs
them with the current interpreter. Imports nothing heavy itself.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
from typing import Any

BENCHMARKS = {
    "suite": "all contenders on all models; writes bench/RESULTS.md, results/suite.json and plots",
    "xnnpack": "edgetorch XNNPACK vs ExecuTorch XNNPACK and ONNX Runtime; prints the ratio table",
    "compiler": "memory plans, .pte sizes and export times vs ExecuTorch; writes results/compiler.md",
    "footprint": "runtime import time and peak memory in fresh processes; writes results/footprint.md",
    "portable": "edgetorch runtime vs ExecuTorch portable kernels on ExecuTorch-written .pte files",
}


def bench_script(name: str) -> pathlib.Path:
    """The path of ``bench/<name>.py`` next to this package; FileNotFoundError outside a source checkout."""
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / f"{name}.py"
    if not script.is_file():
        raise FileNotFoundError(
            f"expected the benchmark script {script}, found nothing; the benchmarks ship with the edgetorch "
            "source checkout, not the installed package: run this command from a clone of the repository"
        )
    return script


def cmd_bench(args: argparse.Namespace) -> int:
    if args.list:
        for name, what in BENCHMARKS.items():
            print(f"{name:<10} {what}")
        return 0
    if args.name is None:
        raise ValueError(f"expected a benchmark name, one of {', '.join(BENCHMARKS)} (or --list)")
    return subprocess.call([sys.executable, str(bench_script(args.name)), *args.args])


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="run a benchmark from bench/ (suite, xnnpack, compiler, footprint, portable); extra ARGS go to it",
    )
    p.add_argument("name", nargs="?", choices=list(BENCHMARKS), help="which benchmark")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark, e.g. --models mlp --quick")
    p.add_argument("--list", action="store_true", help="list the benchmarks and what each measures")
    p.set_defaults(func=cmd_bench)
