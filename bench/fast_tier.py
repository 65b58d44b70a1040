"""The optional accelerated tier (numba) against the pure-NumPy path, in one process, interleaved.

Two tables: every 3x3 depthwise convolution shape of MobileNetV2 (one layer, the NumPy steps the runtime plans
vs the compiled kernel), and whole models lowered with edgetorch's XNNPACK partitioner, run with the tier off
and on (same .pte, same process, alternating rounds). Times are the median and the minimum of each contender's
runs; the minimum is the steadier figure on a loaded machine. Unsets OPENBLAS_* for its own process.

    .venv/bin/python bench/fast_tier.py [--models mobilenet_v2] [--runs 20]
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402

from bench.harness import set_threads, table  # noqa: E402
from edgetorch.backends.xnnpack import fast  # noqa: E402
from edgetorch.backends.xnnpack.runtime import _Window  # noqa: E402

# (input size, channels, stride) of MobileNetV2's depthwise layers (224x224 input)
MOBILENET_DEPTHWISE = [(112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2), (28, 192, 1), (28, 192, 2),
                       (14, 384, 1), (14, 576, 1), (14, 576, 2), (7, 960, 1)]  # fmt: skip


def _numpy_steps(x: np.ndarray, taps: np.ndarray, bias: np.ndarray, y: np.ndarray, win: _Window) -> list:
    """The steps the runtime's NumPy path plans for a depthwise convolution with multiplier 1."""
    views, steps = win.tap_views(x, 0.0)
    tmp = np.empty_like(y)
    ow, c = y.shape[2], y.shape[3]
    for t, view in enumerate(views):
        wt = np.ascontiguousarray(np.broadcast_to(taps[t], (ow, c)))
        if t == 0:
            steps.append(partial(np.multiply, view, wt, out=y))
        else:
            steps += [partial(np.multiply, view, wt, out=tmp), partial(np.add, y, tmp, out=y)]
    return steps + [partial(np.add, y, bias, out=y)]


def _race(contenders: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def layers(runs: int) -> str:
    rng = np.random.default_rng(0)
    rows, total = [], {"numpy": 0.0, "numba": 0.0}
    kernel = fast.depthwise_nhwc()
    for h, c, s in MOBILENET_DEPTHWISE:
        x = rng.standard_normal((1, h, h, c), dtype=np.float32)
        taps, bias = rng.standard_normal((9, c), dtype=np.float32), rng.standard_normal(c, dtype=np.float32)
        win = _Window(3, 3, s, s, 1, 1, 1, 1, 1, 1)
        oh, ow = win.out_hw(h, h)
        y1, y2 = np.empty((1, oh, ow, c), np.float32), np.empty((1, oh, ow, c), np.float32)
        steps = _numpy_steps(x, taps, bias, y1, win)
        window = (3, 3, s, s, 1, 1, 1, 1)

        def numpy_path(steps: list = steps) -> None:
            for step in steps:
                step()

        compiled = partial(kernel, x, taps, bias, y2, *window)
        times = _race({"numpy": numpy_path, "numba": compiled}, runs)
        assert np.array_equal(y1, y2), "the tiers disagree"
        best = {k: min(v) for k, v in times.items()}
        total = {k: total[k] + best[k] for k in total}
        rows.append([f"{h}x{h}x{c} s{s}", f"{best['numpy'] * 1e3:.3f}", f"{best['numba'] * 1e3:.3f}",
                     f"{best['numpy'] / best['numba']:.2f}"])  # fmt: skip
    rows.append(["**all layers**", f"{total['numpy'] * 1e3:.3f}", f"{total['numba'] * 1e3:.3f}",
                 f"{total['numpy'] / total['numba']:.2f}"])  # fmt: skip
    return table(["layer (HxWxC, stride)", "NumPy ms (min)", "numba ms (min)", "speed-up"], rows)


def models(names: list[str], runs: int) -> str:
    import torch

    from bench.models import MODELS
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower
    from edgetorch.runtime import Runtime

    rows = []
    for name in names:
        model, args = MODELS[name]()
        ep = torch.export.export(model.eval(), args)
        pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
        inputs = [a.numpy() for a in args]
        methods, loads = {}, {}
        for tier in (False, True):
            fast.AVAILABLE = tier
            t = time.perf_counter()
            methods[tier] = Runtime.get().load_program(pte).load_method("forward")
            methods[tier].execute(inputs)
            loads[tier] = time.perf_counter() - t
        a, b = methods[False].execute(inputs)[0], methods[True].execute(inputs)[0]
        assert np.array_equal(a, b), "the tiers disagree"
        times = _race(
            {"numpy": partial(methods[False].execute, inputs), "numba": partial(methods[True].execute, inputs)}, runs
        )
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        rows.append([name, f"{med['numpy'] * 1e3:.2f} / {best['numpy'] * 1e3:.2f}",
                     f"{med['numba'] * 1e3:.2f} / {best['numba'] * 1e3:.2f}", f"{best['numpy'] / best['numba']:.2f}",
                     f"{loads[False] * 1e3:.0f} / {loads[True] * 1e3:.0f}"])  # fmt: skip
    return table(["model", "NumPy ms (median / min)", "numba ms (median / min)", "speed-up (min)",
                  "load + first run ms (NumPy / numba)"], rows)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not fast.AVAILABLE:
        sys.exit("numba is not installed or EDGETORCH_FAST=0: pip install edgetorch[fast]")
    set_threads(args.threads)
    print("## Depthwise convolution layers of MobileNetV2\n")
    print(layers(args.runs))
    print("\n## Whole models (edgetorch XNNPACK)\n")
    print(models(args.models.split(","), args.runs))


if __name__ == "__main__":
    main()
