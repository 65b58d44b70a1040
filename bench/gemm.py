"""The packed-weight float32 GEMM (edgetorch/runtime/kernels/gemm.py) against NumPy's sgemm plus a bias and a
clamp pass (what the layers ran before), on the bench models' layer shapes.

Each contender runs in a process of its own (two thread pools that spin after their work, numba's OpenMP one
and OpenBLAS's, take each other's cores when they alternate in one process), at ``--threads`` threads for
both; best of five timings of a loop sized to ~0.2 GFLOP, microseconds a call. Unsets OPENBLAS_* for its own
processes (bench/harness.py).

    python bench/gemm.py --threads 2

``--winograd`` times ResNet-18's 3x3 stride-1 layers instead: Winograd's F(2x2, 3x3)
(edgetorch/runtime/kernels/winograd.py) against the compiled im2col and the packed GEMM (what they ran
before), both in one process; GFLOP/s counted as the direct convolution's 2 x 9 x C x OC a pixel.
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


# (H, W, C, OC): ResNet-18's 3x3 stride-1 layers at 224 x 224, one image (the last, 7 x 7 x 512, stays direct)
CONVOLUTIONS = [(56, 56, 64, 64), (28, 28, 128, 128), (14, 14, 256, 256), (7, 7, 512, 512)]


def _winograd(threads: int) -> None:
    """Print a table: each of CONVOLUTIONS by Winograd and by im2col + packed GEMM, with the bias, us a call."""
    from edgetorch.runtime.kernels import compiled, gemm, windows, winograd

    compiled.set_num_threads(threads)
    rng = np.random.default_rng(0)
    print(f"threads {threads}; us a call (direct-equivalent GFLOP/s)")
    print("| H x W | C -> OC | Winograd F(2x2, 3x3) | im2col + packed GEMM | ratio |")
    print("|---|---|---|---|---|")
    for h, w, c, oc in CONVOLUTIONS:
        x = rng.standard_normal((1, h, w, c), dtype=np.float32)
        filt = rng.standard_normal((oc, 3, 3, c), dtype=np.float32)
        b = rng.standard_normal(oc, dtype=np.float32)
        y = np.empty((1, h, w, oc), np.float32)
        minimal = winograd.step(x, winograd.prepare(filt), b, y, 1, 1, -np.inf, np.inf)
        cols = np.empty((h * w, 9 * c), np.float32)
        fill = windows.im2col_step(x, cols, h, w, 3, 3, 1, 1, 1, 1, 1, 1)
        product = gemm.PackedGemm(np.ascontiguousarray(filt.transpose(1, 2, 3, 0).reshape(9 * c, oc)), b).step(
            cols, y.reshape(h * w, oc)
        )

        def direct(fill=fill, product=product):
            fill()
            product()

        times = []
        for run in (minimal, direct):
            run()
            best = np.inf
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(20):
                    run()
                best = min(best, (time.perf_counter() - t) / 20)
            times.append(best)
        flops = 2 * 9 * h * w * c * oc
        cells = " | ".join(f"{t * 1e6:.0f} ({flops / t / 1e9:.0f})" for t in times)
        print(f"| {h} x {w} | {c} -> {oc} | {cells} | {times[0] / times[1]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", choices=("edgetorch", "numpy"), help=argparse.SUPPRESS)
    parser.add_argument("--winograd", action="store_true", help="ResNet-18's 3x3 layers: Winograd against direct")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.winograd and not args.child:  # re-run with OPENBLAS_* unset, as the GEMM table is
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        cmd = [sys.executable, __file__, "--threads", str(args.threads), "--winograd", "--child"]
        sys.exit(subprocess.run(cmd, env=env).returncode)
    if args.winograd:
        _winograd(args.threads)
        return
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
