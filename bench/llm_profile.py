"""Where an LLM decode step goes: time per instruction kind, and what the dispatch around the kernels costs.

Prefills the chat prompt of ``bench/llm.py``, then traces ``--steps`` single-token decode steps. For every
instruction it keeps the *minimum* over the traced steps (background load mostly drops out), then sums
those minima by operator. It also times untraced steps: their minimum, less the sum of the per-instruction
minima, is what the executor's loop and step closures cost beyond the kernels. Example::

    python bench/llm_profile.py model.pte --gguf SmolLM2.gguf --steps 10
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import reexec_with_clean_blas_env, set_threads  # noqa: E402
from bench.llm import prompt_ids  # noqa: E402


class _MinTracer:
    """An executor tracer keeping each instruction's shortest time (ns) over the traced runs."""

    def __init__(self) -> None:
        self.best: dict[int, int] = {}
        self.current = 0

    def begin_run(self, executor) -> None:
        pass

    def instruction(self, executor, pc: int, t0: int, t1: int) -> None:
        d = t1 - t0
        if d < self.best.get(pc, 1 << 62):
            self.best[pc] = d

    def end_run(self, executor, start: int, end: int) -> None:
        pass


def _timed(step, pc: int, tracer: _MinTracer):
    clock = time.perf_counter_ns

    def run():
        t0 = clock()
        result = step()
        tracer.instruction(None, pc, t0, clock())
        return result

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pte")
    parser.add_argument("--gguf", required=True, help="the tokenizer (the GGUF the program came from)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--unfused", action="store_true", help="turn the executor's fusion off")
    args = parser.parse_args()
    reexec_with_clean_blas_env()
    set_threads(args.threads, with_torch=False)
    from edgetorch.extension.llm.runner import TextLLMRunner

    runner = TextLLMRunner(args.pte, args.gguf)
    runner.load()
    ids = prompt_ids(runner.tokenizer)
    executor = runner._method._executor
    if args.unfused:
        executor.fused = None
    token = int(runner._forward(ids).argmax())
    plain = []
    for _ in range(args.steps):  # untraced steps first: the executor's own speed
        start = time.perf_counter_ns()
        token = int(runner._forward([token]).argmax())
        plain.append(time.perf_counter_ns() - start)
    tracer = _MinTracer()
    names: dict[int, str] = {}
    if executor.fused is None:  # the tracer times each instruction
        executor.tracer = tracer
    else:  # time the fused steps the untraced runs take (a traced run takes the unfused ones)
        saved = executor.fused
        steps, pcs = saved
        fused_names = {pc: step.__name__ for step, pc in zip(steps, pcs) if step not in executor.steps}
        names.update({pc: f"fused {name}" for pc, name in fused_names.items()})
        executor.fused = ([_timed(step, pc, tracer) for step, pc in zip(steps, pcs)], pcs)
    try:
        for _ in range(args.steps):
            token = int(runner._forward([token]).argmax())
    finally:
        executor.tracer = None
        if names:
            executor.fused = saved
    by_op: dict[str, list[int]] = collections.defaultdict(list)
    for pc, ns in tracer.best.items():
        by_op[names.get(pc) or executor.describe(pc)].append(ns)
    total = sum(tracer.best.values())
    step = min(plain)
    print(f"{args.pte}: {len(tracer.best)} steps / token, best untraced step {step / 1e6:.2f} ms")
    print(f"sum of per-instruction minima {total / 1e6:.2f} ms; loop and step overhead beyond it "
          f"{(step - total) / 1e6:.2f} ms")  # fmt: skip
    print("| operator | count | sum of minima ms | mean us |")
    print("|---|---|---|---|")
    ranked = sorted(by_op.items(), key=lambda kv: -sum(kv[1]))
    for name, times in ranked[: args.top]:
        print(f"| {name} | {len(times)} | {sum(times) / 1e6:.2f} | {sum(times) / len(times) / 1e3:.1f} |")


if __name__ == "__main__":
    main()
