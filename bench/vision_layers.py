"""Per-layer times of the XNNPACK delegate's convolutions in the vision models (MobileNetV2, EfficientNet-Lite0),
at 1 thread and 2, and for every pointwise layer the alternatives on the same shape at 1 thread: NumPy's sgemm
with the bias and clamp passes, and the packed GEMM's 8- and 16-lane tiles.

Each layer's steps are timed where the delegate bound them (its own buffers, the last run's data), best of
``--runs`` calls after a warm-up, with the kernels tuning chose. At 2 threads every split site splits
(``Policy(split_adapts=False)``), so the column shows what the parallel variant costs, not what a site's
timing would pick. Unsets OPENBLAS_* (bench/harness.py). Prints one table per model and the totals by kind.

    .venv/bin/python bench/vision_layers.py [--models mobilenet_v2,efficientnet_lite0] [--runs 20]
"""

from __future__ import annotations

import argparse
import collections
import pathlib
import sys
import time
from functools import partial

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from bench.harness import table  # noqa: E402
from bench.profile_xnnpack import load_edgetorch, lower  # noqa: E402
from edgetorch.backends.xnnpack import schema as xs  # noqa: E402
from edgetorch.runtime import policy, set_num_threads  # noqa: E402
from edgetorch.runtime.kernels import blas_threads, gemm  # noqa: E402


def best(fn, runs: int) -> float:
    for _ in range(3):
        fn()
    out = np.inf
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t0)
    return out


def layers(delegates: list) -> list[tuple[str, tuple, list]]:
    """(kind, shape, the layer's steps) for every convolution node of every delegate, from a schedule rebuilt by
    planners that record what they bind (pointwise shape: (M, K, N); others: (H, W, C, OC, KH, stride))."""
    found = []
    for d, nodes in delegates:
        planners = d.planners

        def recording(planner, n):
            def plan(env):
                steps = planner(env)
                if isinstance(n, (xs.XNNConv2d, xs.XNNDepthwiseConv2d)):
                    _, h, w, c = env[n.input1_id].shape
                    _, oh, ow, oc = env[n.output_id].shape
                    if isinstance(n, xs.XNNDepthwiseConv2d):
                        kind, shape = "depthwise", (h, w, c, oc, n.kernel_height, n.subsampling_height)
                    elif n.kernel_height == n.kernel_width == n.subsampling_height == 1:
                        kind, shape = "pointwise", (oh * ow, c, oc)
                    else:
                        kind, shape = "conv", (h, w, c, oc, n.kernel_height, n.subsampling_height)
                    found.append((kind, shape, steps))
                return steps

            return plan

        d.planners = [recording(p, node.xnode_union) for p, node in zip(planners, nodes)]
        try:
            for shapes, old in list(d.schedules.items()):
                del d.schedules[shapes]
                d.schedule(shapes)
                for dst, src in zip(d.schedules[shapes].inputs, old.inputs):
                    np.copyto(dst, src)
        finally:
            d.planners = planners
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,efficientnet_lite0")
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    from bench.models import MODELS

    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        method, delegates = load_edgetorch(lower(name, "edgetorch"))
        method.execute([x.numpy() for x in inputs])
        rows, totals = [], collections.Counter()
        for kind, shape, steps in layers(delegates):
            run = partial(_all, steps)
            cells = {}
            for threads in (1, 2):
                set_num_threads(threads)
                with threadpool_limits(threads), blas_threads.held(True), policy.using(split_adapts=False):
                    cells[f"ours {threads}t"] = best(run, args.runs)
            if kind == "pointwise":
                m, k, nn = shape
                rng = np.random.default_rng(0)
                x = rng.standard_normal((m, k), dtype=np.float32)
                w = rng.standard_normal((k, nn), dtype=np.float32)
                b = rng.standard_normal(nn, dtype=np.float32)
                y = np.empty((m, nn), np.float32)
                set_num_threads(1)
                with threadpool_limits(1):
                    cells["sgemm"] = best(gemm.sgemm_step(x, w, b, 0.0, 6.0, y), args.runs)
                    for kernel in ("packed", "packed16"):
                        cells[kernel] = best(gemm.PackedGemm(w, b, 0.0, 6.0).step(x, y, kernel), args.runs)
            for k_, v in cells.items():
                totals[(kind, k_)] += v
            rows.append([kind, "x".join(map(str, shape))] + [f"{cells.get(c, np.nan) * 1e6:.1f}" for c in COLUMNS])
        print(f"\n{name}: us a layer, best of {args.runs}")
        print(table(["kind", "shape", *COLUMNS], rows))
        print(
            table(
                ["kind", *COLUMNS],
                [[k] + [f"{totals[(k, c)] * 1e3:.3f}" for c in COLUMNS] for k in ("pointwise", "conv", "depthwise")],
            )
        )


COLUMNS = ["ours 1t", "ours 2t", "sgemm", "packed", "packed16"]


def _all(steps: list) -> None:
    for step in steps:
        step()


if __name__ == "__main__":
    main()
