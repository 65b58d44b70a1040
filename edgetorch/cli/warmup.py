"""``edgetorch warmup PROGRAM...``: compile, ahead of time, the fast tier's kernels that the programs' methods
use, by running each method on zeros; numba keeps them on disk, so the first real run starts at full speed.
Each method runs at its inputs' largest shapes and, where they are dynamic, at their smallest (an LLM's prefill
and decode take different kernels), once splitting at every call site (the kernels' parallel variants) and once
on one thread (their serial ones): at run time a site picks between the two by timing both.
Prints how many kernels were compiled and how long it took. Torch-free."""

from __future__ import annotations

import argparse
import time
from typing import Any

from edgetorch.cli._common import EXIT_OK, load_program


def register(sub: Any) -> None:
    warmup = sub.add_parser("warmup", help="compile the fast tier's kernels for programs ahead of their first run")
    warmup.add_argument("programs", nargs="+", metavar="PROGRAM", help=".pte files whose methods to run once")
    warmup.add_argument("--threads", type=int, help="threads the real runs will use (default: as they would)")
    warmup.set_defaults(func=cmd_warmup)


def _zeros(meta: Any, smallest: bool) -> list[Any]:
    """Zero inputs at their declared (upper-bound) sizes, or with every dynamic one's dimensions at 1."""
    import numpy as np

    inputs: list[Any] = []
    for i in range(meta.num_inputs()):
        info = meta.input_tensor_meta(i)
        if isinstance(info, str):
            inputs.append(0)
            continue
        sizes = tuple(info.sizes())
        inputs.append(
            np.zeros(tuple(min(d, 1) for d in sizes) if smallest and info.dynamic else sizes, info.numpy_dtype)
        )
    return inputs


def _dynamic(meta: Any) -> bool:
    infos = (meta.input_tensor_meta(i) for i in range(meta.num_inputs()))
    return any(getattr(info, "dynamic", False) for info in infos)


def cmd_warmup(args: argparse.Namespace) -> int:
    from edgetorch.runtime import policy, set_num_threads
    from edgetorch.runtime.kernels import compiled

    if args.threads is not None:
        set_num_threads(args.threads)
    if not policy.compiled_tier():
        print("the fast tier is off (numba is not installed, or EDGETORCH_FAST=0): nothing to compile")
        return EXIT_OK
    start = time.perf_counter()
    threads = policy.current().thread_count()
    for path in args.programs:
        program = load_program(path)
        for name in sorted(program.method_names):
            method = program.load_method(name)
            shapes = (False, True) if _dynamic(method.metadata) else (False,)
            for variant in (dict(threads=max(2, threads), split_adapts=False), dict(threads=1)):
                with policy.using(**variant):
                    for smallest in shapes:
                        method.execute(_zeros(method.metadata, smallest))
            print(f"{path} {name}: ran {2 * len(shapes)} times")
    done = compiled.COMPILING
    if done.count:
        print(f"compiled {done.count} kernels in {done.seconds:.1f} s ({time.perf_counter() - start:.1f} s in all)")
    else:
        print("nothing to compile: every kernel these programs use came from numba's on-disk cache")
    return EXIT_OK
