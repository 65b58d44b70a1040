"""The optional accelerated tier (numba) against the pure-NumPy path, in one process, interleaved.

Two tables: every 3x3 depthwise convolution shape of MobileNetV2 (a one-layer program per shape), and whole models lowered with edgetorch's XNNPACK partitioner, run with the tier off
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
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402

from bench.harness import set_threads, table  # noqa: E402
from edgetorch.runtime import policy  # noqa: E402

# (input size, channels, stride) of MobileNetV2's depthwise layers (224x224 input)
MOBILENET_DEPTHWISE = [(112, 32, 1), (112, 96, 2), (56, 144, 1), (56, 144, 2), (28, 192, 1), (28, 192, 2),
                       (14, 384, 1), (14, 576, 1), (14, 576, 2), (7, 960, 1)]  # fmt: skip


def _race(contenders: dict[str, Callable[[], object]], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(runs):
        for name, fn in contenders.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def _both_tiers(model: Any, args: tuple, runs: int) -> tuple[dict[str, list[float]], dict[str, float]]:
    """``model`` lowered by edgetorch's XNNPACK partitioner, loaded once per tier (the tier is chosen when a
    method plans its steps) and timed in alternation: (run times, load + first run time) per tier."""
    import torch

    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower
    from edgetorch.runtime import Runtime

    ep = torch.export.export(model.eval(), args)
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    inputs = [a.numpy() for a in args]
    methods, loads = {}, {}
    for name, tier in (("numpy", False), ("numba", True)):
        with policy.using(compiled=tier):
            t = time.perf_counter()
            methods[name] = Runtime.get().load_program(pte).load_method("forward")
            _run_tier(methods[name], inputs, tier)
            loads[name] = time.perf_counter() - t
    # Bit for bit where the compiled kernel sums in NumPy's order (depthwise, bias + clamp); GELU, softmax and
    # layer norm use their own exp and sum order, so equal within float32 rounding.
    a, b = _run_tier(methods["numpy"], inputs, False)[0], _run_tier(methods["numba"], inputs, True)[0]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg="the tiers differ")
    runs_of = {name: partial(_run_tier, m, inputs, name == "numba") for name, m in methods.items()}
    return _race(runs_of, runs), loads


def _run_tier(method: Any, inputs: list, tier: bool) -> list:
    """One run with the portable kernels' compiled tier on or off (they choose at each call; the XNNPACK
    delegate chose when the method was loaded)."""
    with policy.using(compiled=tier):
        return method.execute(inputs)


def layers(runs: int) -> str:
    import torch

    torch.manual_seed(0)
    rows, total = [], {"numpy": 0.0, "numba": 0.0}
    for h, c, s in MOBILENET_DEPTHWISE:
        conv = torch.nn.Conv2d(c, c, 3, s, 1, groups=c)
        times, _ = _both_tiers(conv, (torch.randn(1, c, h, h),), runs)
        best = {k: min(v) for k, v in times.items()}
        total = {k: total[k] + best[k] for k in total}
        rows.append([f"{h}x{h}x{c} s{s}", f"{best['numpy'] * 1e3:.3f}", f"{best['numba'] * 1e3:.3f}",
                     f"{best['numpy'] / best['numba']:.2f}"])  # fmt: skip
    rows.append(["**all layers**", f"{total['numpy'] * 1e3:.3f}", f"{total['numba'] * 1e3:.3f}",
                 f"{total['numpy'] / total['numba']:.2f}"])  # fmt: skip
    return table(["layer (HxWxC, stride)", "NumPy ms (min)", "numba ms (min)", "speed-up"], rows)


def models(names: list[str], runs: int) -> str:
    from bench.models import MODELS

    rows = []
    for name in names:
        times, loads = _both_tiers(*MODELS[name](), runs)
        med = {k: statistics.median(v) for k, v in times.items()}
        best = {k: min(v) for k, v in times.items()}
        rows.append([name, f"{med['numpy'] * 1e3:.2f} / {best['numpy'] * 1e3:.2f}",
                     f"{med['numba'] * 1e3:.2f} / {best['numba'] * 1e3:.2f}", f"{best['numpy'] / best['numba']:.2f}",
                     f"{loads['numpy'] * 1e3:.0f} / {loads['numba'] * 1e3:.0f}"])  # fmt: skip
    return table(["model", "NumPy ms (median / min)", "numba ms (median / min)", "speed-up (min)",
                  "load + first run ms (NumPy / numba)"], rows)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not policy.compiled_tier():
        sys.exit("numba is not installed or EDGETORCH_FAST=0: pip install edgetorch[fast]")
    set_threads(args.threads)
    print("## Depthwise convolution layers of MobileNetV2\n")
    print(layers(args.runs))
    print("\n## Whole models (edgetorch XNNPACK)\n")
    print(models(args.models.split(","), args.runs))


if __name__ == "__main__":
    main()
