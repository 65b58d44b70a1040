"""The packed-weight float32 GEMM (edgetorch/runtime/kernels/gemm.py) against NumPy's sgemm plus a bias and a
clamp pass (what the layers ran before), on the bench models' layer shapes.

Each contender runs in a process of its own (two thread pools that spin after their work, numba's OpenMP one
and OpenBLAS's, take each other's cores when they alternate in one process), at ``--threads`` threads for
both; best of five timings of a loop sized to ~0.2 GFLOP, microseconds a call. Unsets OPENBLAS_* for its own
processes (bench/harness.py).

    python bench/gemm.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

# (M, K, N): the MLP's four layers on 8 rows, MobileNetV2's pointwise convolutions, ViT-tiny's and MiniLM's
# linear layers
SHAPES = [
    (8, 784, 1024), (8, 1024, 1024), (8, 1024, 512), (8, 512, 10),
    (12544, 32, 16), (12544, 16, 96), (3136, 96, 24), (3136, 24, 144), (3136, 144, 24), (784, 144, 32),
    (784, 32, 192), (784, 192, 32), (196, 192, 64), (196, 64, 384), (196, 384, 64), (196, 384, 96),
    (196, 96, 576), (196, 576, 96), (49, 576, 160), (49, 160, 960), (49, 960, 160), (49, 960, 320),
    (49, 320, 1280),
    (197, 192, 576), (197, 192, 768), (197, 768, 192), (256, 384, 1536), (256, 1536, 384),
]  # fmt: skip


def _time(contender: str, threads: int) -> list[float]:
    """Seconds a call of ``contender`` for every shape, in this process."""
    from edgetorch.runtime.kernels import compiled, gemm

    compiled.set_num_threads(threads)
    rng = np.random.default_rng(0)
    times = []
    for m, k, n in SHAPES:
        x = rng.standard_normal((m, k), dtype=np.float32)
        w = rng.standard_normal((k, n), dtype=np.float32)
        b = rng.standard_normal(n, dtype=np.float32)
        y = np.empty((m, n), np.float32)
        if contender == "edgetorch":
            run = gemm.PackedGemm(w, b, 0.0, 6.0).step(x, y)
        else:

            def run(x=x, w=w, b=b, y=y):
                np.matmul(x, w, out=y)
                y += b
                np.clip(y, 0.0, 6.0, out=y)

        run()
        reps = max(3, int(2e8 / (2 * m * k * n)))
        best = np.inf
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(reps):
                run()
            best = min(best, (time.perf_counter() - t) / reps)
        times.append(best)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=("edgetorch", "numpy"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only:
        print(json.dumps(_time(args.only, args.threads)))
        return
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = str(args.threads)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    results = {}
    for contender in ("edgetorch", "numpy"):
        cmd = [sys.executable, __file__, "--threads", str(args.threads), "--only", contender]
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
        results[contender] = json.loads(out.strip().splitlines()[-1])
    print(f"threads {args.threads}; us a call (GFLOP/s)")
    print("| M | K | N | packed GEMM | sgemm + bias + clamp | ratio |")
    print("|---|---|---|---|---|---|")
    total = [0.0, 0.0]
    for (m, k, n), ours, theirs in zip(SHAPES, results["edgetorch"], results["numpy"]):
        flops = 2 * m * k * n
        total = [total[0] + ours, total[1] + theirs]
        cells = " | ".join(f"{t * 1e6:.1f} ({flops / t / 1e9:.0f})" for t in (ours, theirs))
        print(f"| {m} | {k} | {n} | {cells} | {ours / theirs:.2f} |")
    print(f"| all | | | {total[0] * 1e3:.2f} ms | {total[1] * 1e3:.2f} ms | {total[0] / total[1]:.2f} |")


if __name__ == "__main__":
    main()
