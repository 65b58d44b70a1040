"""``edgetorch run PROGRAM``: run a method with given or seeded random inputs; print outputs and latency. Torch-free."""

from __future__ import annotations

import argparse
import time
from typing import Any

from edgetorch.cli._common import EXIT_OK, load_program


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run a method of a .pte program and print its outputs and latency")
    run.add_argument("program", help="path to a .pte file")
    run.add_argument("--method", default="forward", help="method to run (default: forward)")
    run.add_argument("--input", action="append", metavar="FILE.npy", help="an input, once per method input, in order")
    run.add_argument("--random", action="store_true", help="feed seeded random inputs of the planned shapes")
    run.add_argument("--seed", type=int, default=0, help="seed for --random")
    run.add_argument("--iterations", type=int, default=10, help="timed runs after the first (default 10)")
    run.add_argument("--output", metavar="PREFIX", help="save outputs as PREFIX_<i>.npy")
    run.set_defaults(func=cmd_run)


def _summary(x: Any) -> str:
    import numpy as np

    if not isinstance(x, np.ndarray):
        return f"{type(x).__name__} {x!r}"
    head = f"shape={list(x.shape)} dtype={x.dtype}"
    if x.size == 0:
        return head + " (empty)"
    if x.dtype.kind in "fiub":
        v = x.astype(np.float64)
        return head + f" min={v.min():.6g} max={v.max():.6g} mean={v.mean():.6g}"
    return head


def _random_input(info: Any, rng: Any) -> Any:

    if isinstance(info, str):
        raise ValueError(f"cannot make a random {info} input; pass it with --input")
    if info.numpy_dtype.kind == "f":
        return rng.standard_normal(info.sizes).astype(info.numpy_dtype)
    if info.numpy_dtype.kind == "b":
        return rng.integers(0, 2, info.sizes).astype(bool)
    return rng.integers(0, 10, info.sizes).astype(info.numpy_dtype)


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    program = load_program(args.program)
    method = program.load_method(args.method)
    meta = method.metadata
    if args.input:
        inputs = [np.load(p, allow_pickle=False) for p in args.input]
    elif args.random or meta.num_inputs == 0:
        rng = np.random.default_rng(args.seed)
        inputs = [_random_input(meta.input_tensor_meta(i), rng) for i in range(meta.num_inputs)]
    else:
        raise ValueError(
            f"method {args.method!r} takes {meta.num_inputs} inputs; pass --input FILE.npy for each, or --random"
        )
    outputs = method.execute(inputs)
    times = []
    for _ in range(max(args.iterations, 1)):
        t0 = time.perf_counter()
        method.execute(inputs)
        times.append(time.perf_counter() - t0)
    for i, out in enumerate(outputs):
        print(f"output {i}: {_summary(out)}")
        if args.output:
            np.save(f"{args.output}_{i}.npy", out)
    times.sort()
    print(f"latency: median {times[len(times) // 2] * 1e3:.3f} ms over {len(times)} runs (min {times[0] * 1e3:.3f} ms)")
    return EXIT_OK
