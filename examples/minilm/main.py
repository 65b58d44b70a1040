"""The main job: all-MiniLM-L6-v2 exported with edgetorch and run without PyTorch.

.venv/bin/python examples/minilm/main.py [--backend xnnpack|portable] [--out out/minilm]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent


# This machine sets these to work around old OpenBLAS builds; they slow current NumPy's BLAS
# several-fold, so the timed runtime step runs without them (tests and CI keep them).
SLOW_BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def step(n: int, total: int, title: str, argv: list[str], env: dict | None = None) -> None:
    print(f"[{n}/{total}] {title}", flush=True)
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, *argv], env=env)
    if result.returncode != 0:
        raise SystemExit(f"step {n} ({title}) failed with exit code {result.returncode}")
    print(f"[{n}/{total}] done in {time.perf_counter() - t0:.1f} s\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["xnnpack", "portable"], default="xnnpack")
    parser.add_argument("--out", type=pathlib.Path, default=HERE.parents[1] / "out" / "minilm")
    args = parser.parse_args()
    step(
        1,
        2,
        "export all-MiniLM-L6-v2 with edgetorch (PyTorch process)",
        [str(HERE / "export_minilm.py"), str(args.out), "--backend", args.backend],
    )
    env = {k: v for k, v in os.environ.items() if k not in SLOW_BLAS_VARS}
    if len(env) != len(os.environ):
        print(f"(the runtime step runs with {' and '.join(SLOW_BLAS_VARS)} unset: they slow NumPy's BLAS)")
    # It reports a latency, so on a machine that has not compiled the fast tier's kernels yet it compiles them
    # before its first run rather than run on the NumPy tier while they compile in the background.
    env.setdefault("EDGETORCH_COMPILE", "wait")
    step(
        2,
        2,
        "embed sentences with the edgetorch runtime (PyTorch blocked)",
        [str(HERE / "embed.py"), str(args.out)],
        env,
    )


if __name__ == "__main__":
    main()
