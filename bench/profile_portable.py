"""Where the time goes in edgetorch's portable runtime, and what its load-time plan work buys.

Each model is exported by edgetorch without delegation (``to_edge(...).to_executorch()``) and loaded twice:
as the runtime loads it (static copies elided, chains fused: edgetorch/runtime/copy_elision.py and
static_fusion.py) and with that work undone (no elision, the unfused steps). Both run in one process,
interleaved, on ``--threads`` BLAS threads; the table gives their medians and the speed-up. Then every step
of the plan as it runs is timed and summed by operator (a fused step under its first instruction's operator
and its compiled kernel's name), to show where the time goes.

    .venv/bin/python bench/profile_portable.py [--models mobilenet_v2,vit_tiny] [--threads 2] [--top 12]
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
import torch  # noqa: E402

from bench.harness import set_threads, table  # noqa: E402
from bench.models import MODELS  # noqa: E402
from bench.profile_xnnpack import interleaved  # noqa: E402
from edgetorch.runtime.kernels import blas_threads  # noqa: E402


def _step_name(ex, step, pc: int) -> str:
    name = ex.operators[ex.instructions[pc].instr_args.op_index]
    kernel = getattr(getattr(step, "func", None), "py_func", None) or getattr(step, "__name__", None)
    return f"{name} [{getattr(kernel, '__name__', kernel)}]" if kernel not in (None, "step", "<lambda>") else name


def step_profile(method, inputs: list, runs: int) -> tuple[collections.Counter, collections.Counter, int]:
    """Seconds per run and steps per run of every operator, over the plan's untraced steps."""
    ex = method._executor
    method.execute(inputs)
    steps, pcs = ex.fused if ex.fused is not None else (ex.steps, ex.step_pcs)
    names = [_step_name(ex, s, pc) for s, pc in zip(steps, pcs)]
    seconds, counts = collections.Counter(), collections.Counter(names)
    clock = time.perf_counter
    with blas_threads.held(ex.own_threads):  # as the executor runs them: one thread pool at a time
        for _ in range(runs):
            ex.set_inputs(inputs)  # the plan may reuse the inputs' memory once they are read
            for name, step in zip(names, steps):
                t0 = clock()
                step()
                seconds[name] += clock() - t0
    return collections.Counter({k: v / runs for k, v in seconds.items()}), counts, len(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,vit_tiny")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    set_threads(args.threads)
    import edgetorch.runtime.executor as executor
    from edgetorch.exir import to_edge
    from edgetorch.runtime import Runtime

    rows = []
    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        pte = to_edge(torch.export.export(model, inputs)).to_executorch().buffer
        planned = Runtime.get().load_program(pte).load_method("forward")
        elide = executor.elide_copies
        executor.elide_copies = lambda ex, live: set()
        try:
            plain = Runtime.get().load_program(pte).load_method("forward")
        finally:
            executor.elide_copies = elide
        plain._executor.fused = None
        xs = [x.numpy() for x in inputs]
        same = np.array_equal(planned.execute(xs)[0], plain.execute(xs)[0])
        time.sleep(1.0)
        # Each in its own window, not interleaved: a planned method that runs numba's threads leaves them spinning
        # for a while after each run, which would slow the plain method's BLAS between its runs.
        t = interleaved({"planned": partial(planned.execute, xs)}, args.runs, 30)
        time.sleep(1.0)
        t |= interleaved({"plain": partial(plain.execute, xs)}, args.runs, 30)
        ex = planned._executor
        rows.append(
            [name, f"{t['planned'] * 1e3:.2f}", f"{t['plain'] * 1e3:.2f}", f"{t['plain'] / t['planned']:.2f}x",
             f"{len(ex.elided)}", f"{len(ex.steps) - (len(ex.fused[0]) if ex.fused else len(ex.steps))}",
             "yes" if same else "no"]
        )  # fmt: skip
        seconds, counts, nsteps = step_profile(planned, xs, 10)
        total = sum(seconds.values())
        print(f"  {name}: {nsteps} steps, {total * 1e3:.2f} ms summed", flush=True)
        for op, s in seconds.most_common(args.top):
            print(f"    {op:62s} {counts[op]:4d} {s * 1e3:8.3f} ms {s / total:6.1%}", flush=True)
    headers = ["model", "planned ms", "unplanned ms", "speed-up", "copies elided", "steps fused away", "same bits"]
    print()
    print(table(headers, rows))


if __name__ == "__main__":
    main()
