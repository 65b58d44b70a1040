"""The vision example: EfficientNet-Lite0 (ImageNet weights) exported fp32 and int8 by edgetorch, then run on photos
without PyTorch.

.venv/bin/python examples/vision/main.py [--out out/vision]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent

# This machine sets these for old OpenBLAS builds; they slow current NumPy's BLAS, so the runtime step drops them.
SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def run(script: str, out: pathlib.Path, title: str, env: dict | None = None) -> None:
    """Run one step of the example in a process of its own; stop the example if it fails."""
    print(f"{title}", flush=True)
    t0 = time.perf_counter()
    if subprocess.run([sys.executable, str(HERE / script), str(out)], env=env).returncode != 0:
        raise SystemExit(f"{script} failed")
    print(f"({script}: {time.perf_counter() - t0:.1f} s)\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=HERE.parents[1] / "out" / "vision")
    args = parser.parse_args()
    run("export_vision.py", args.out, "[1/2] export EfficientNet-Lite0 fp32 and int8 with edgetorch (PyTorch process)")
    env = {k: v for k, v in os.environ.items() if k not in SLOW_BLAS_VARS}
    run("classify.py", args.out, "[2/2] classify photos with the edgetorch runtime (PyTorch blocked)", env)


if __name__ == "__main__":
    main()
