"""``edgetorch warmup PROGRAM...``: compile, ahead of time, the fast tier's kernels that the programs' methods
use, by running each method on zeros (runtime/warm.py's ``warm_up``); numba keeps them on disk, so the first real
run starts at full speed instead of on the NumPy tier while a background process compiles them. Prints how many
kernels were compiled and how long it took, and records each program as compiled on this machine. Torch-free."""

from __future__ import annotations

import argparse
import time
from typing import Any

from edgetorch.cli._common import EXIT_OK


def register(sub: Any) -> None:
    warmup = sub.add_parser("warmup", help="compile the fast tier's kernels for programs ahead of their first run")
    warmup.add_argument("programs", nargs="+", metavar="PROGRAM", help=".pte files whose methods to run once")
    warmup.add_argument("--threads", type=int, help="threads the real runs will use (default: as they would)")
    warmup.set_defaults(func=cmd_warmup)


def cmd_warmup(args: argparse.Namespace) -> int:
    import dataclasses

    from edgetorch.runtime import Runtime, policy, set_num_threads, warm
    from edgetorch.runtime.kernels import compiled

    policy.install(dataclasses.replace(policy.current(), compile_in_background=False))
    if args.threads is not None:
        set_num_threads(args.threads)
    if not policy.compiled_tier():
        print("the fast tier is off (numba is not installed, or EDGETORCH_FAST=0): nothing to compile")
        return EXIT_OK
    start = time.perf_counter()
    threads = policy.current().thread_count()
    for path in args.programs:
        began = time.perf_counter()
        for name, runs in warm.warm_up(Runtime.get().load_program(path), threads):
            print(f"{path} {name}: ran {runs} times")
        warm.mark_done([path], time.perf_counter() - began)
    done = compiled.COMPILING
    if done.count:
        print(f"compiled {done.count} kernels in {done.seconds:.1f} s ({time.perf_counter() - start:.1f} s in all)")
    else:
        print("nothing to compile: every kernel these programs use came from numba's on-disk cache")
    return EXIT_OK
