"""Decode and prefill speed of several LLM ``.pte`` files, interleaved in one process: a fair A/B on a busy machine.

Each round resets every runner, prefills the ~47-token chat prompt of ``bench/llm.py`` in one call, then times
``--steps`` single-token decode steps; the programs take turns, so background load hits them alike. Reports the
median prefill rate and the median (and best) of each round's best decode step. Example::

    python bench/llm_ab.py --gguf SmolLM2.gguf before.pte after.pte --rounds 6

``--unfused`` adds, for every program, a second runner with the executor's load-time fusion of element-wise
chains turned off (``edgetorch.runtime.fusion``): the fusion's own A/B in the same process. ``--before REV``
adds a runner whose fusion (``edgetorch/runtime/fusion.py``) and LLM kernels (``kernels/llama.py``) are those of
git revision REV: a change to either, A/B in one process. ``--one-kernel-thread`` adds, for every program, a
runner loaded and run with ``edgetorch.runtime.set_num_threads(1)`` (BLAS keeps ``--threads``): the integer
GEMVs unsplit, as before they took threads, in the same process (its decode; not its prefill, which follows the
other runner's decode steps while OpenMP's worker still spins: compare prefill across processes, bench/llm.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import module_at, reexec_with_clean_blas_env, set_threads  # noqa: E402
from bench.llm import prompt_ids  # noqa: E402


def _runner_before(pte: str, gguf: str, rev: str):
    """A loaded runner whose executor binds the fusion and the ``llama`` kernels of revision ``rev``."""
    from edgetorch.extension.llm.runner import TextLLMRunner
    from edgetorch.runtime import executor
    from edgetorch.runtime.kernels import llama  # noqa: F401  (registered now, restored below)
    from edgetorch.runtime.kernels.registry import KERNELS

    names = [name for name in KERNELS._kernels if name.startswith("llama::")]
    current, fuse = {name: KERNELS[name] for name in names}, executor.fuse_steps
    try:
        executor.fuse_steps = module_at(rev, "edgetorch/runtime/fusion.py").fuse_steps
        module_at(rev, "edgetorch/runtime/kernels/llama.py")  # registers its kernels over the current ones
        runner = TextLLMRunner(pte, gguf)
        runner.load()
    finally:
        executor.fuse_steps = fuse
        for name, entry in current.items():
            KERNELS[name] = entry
    return runner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pte", nargs="+")
    parser.add_argument("--gguf", required=True, help="the tokenizer (the GGUF the programs came from)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--unfused", action="store_true", help="also run each program with fusion off")
    parser.add_argument(
        "--one-kernel-thread", action="store_true", help="also run each program with set_num_threads(1)"
    )
    parser.add_argument("--before", metavar="REV", help="also run each program with the fusion and kernels of REV")
    args = parser.parse_args()
    reexec_with_clean_blas_env()
    set_threads(args.threads, with_torch=False)
    from edgetorch.extension.llm.runner import TextLLMRunner

    names = [Path(p).name for p in args.pte]
    runners = [TextLLMRunner(p, args.gguf) for p in args.pte]
    if args.unfused:
        names += [f"{Path(p).name} (unfused)" for p in args.pte]
        runners += [TextLLMRunner(p, args.gguf) for p in args.pte]
    for r in runners:
        r.load()
    for r in runners[len(args.pte) :]:
        r._method._executor.fused = None
    if args.before:
        names += [f"{Path(p).name} ({args.before})" for p in args.pte]
        runners += [_runner_before(p, args.gguf, args.before) for p in args.pte]
    one_thread = set()
    if args.one_kernel_thread:
        from edgetorch.runtime import set_num_threads

        set_num_threads(1)  # read at load too: QB4W weights are laid out in a tile a thread
        for p in args.pte:
            one_thread.add(f"{Path(p).name} (1 kernel thread)")
            names.append(f"{Path(p).name} (1 kernel thread)")
            runners.append(TextLLMRunner(p, args.gguf))
            runners[-1].load()
        set_num_threads(args.threads)
    counts = {}
    for name, r in zip(names, runners):
        ex = r._method._executor
        counts[name] = (len(ex.steps), len(ex.fused[0]) if ex.fused is not None else len(ex.steps))
    ids = prompt_ids(runners[0].tokenizer)
    prefill: dict[str, list[float]] = {p: [] for p in names}
    decode: dict[str, list[float]] = {p: [] for p in names}
    cpu: dict[str, list[float]] = {p: [] for p in names}  # the same steps in this thread's CPU time
    for _ in range(args.rounds):
        for p, r in zip(names, runners):
            if one_thread:
                set_num_threads(1 if p in one_thread else args.threads)
            r.reset()
            start = time.perf_counter()
            token = int(r._forward(ids).argmax())
            prefill[p].append(time.perf_counter() - start)
            steps, cpu_steps = [], []
            for _ in range(args.steps):
                start, start_cpu = time.perf_counter(), time.thread_time()
                token = int(r._forward([token]).argmax())
                steps.append(time.perf_counter() - start)
                cpu_steps.append(time.thread_time() - start_cpu)
            decode[p].append(min(steps))
            cpu[p].append(min(cpu_steps))
    print(f"{len(ids)}-token prompt, {args.rounds} rounds x {args.steps} decode steps, {args.threads} BLAS thread(s)")
    print(
        "| program | instructions | steps run | prefill tok/s (median) | decode step ms (median of round bests) "
        "| decode tok/s | best step ms | decode step CPU ms (median of round bests) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for p in names:
        step = statistics.median(decode[p])
        n, run = counts[p]
        run = n if p.endswith("(unfused)") else run
        print(
            f"| {p} | {n} | {run} | {len(ids) / statistics.median(prefill[p]):.1f} | {step * 1e3:.1f} | "
            f"{1 / step:.2f} | {min(decode[p]) * 1e3:.1f} | {statistics.median(cpu[p]) * 1e3:.1f} |"
        )


if __name__ == "__main__":
    main()
