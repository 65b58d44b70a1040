"""Several edgetorch programs, or one program under several kernel choices, timed in one process in turn:
round after round, each variant runs ``--per-round`` times and its median counts, so a slow spell of the host
falls on every variant alike. The figures behind docs/benchmarks.md's "Tuning by the thread's CPU time".

    .venv/bin/python bench/interleaved.py gpt2-edgetorch-xnnpack.pte gpt2-edgetorch-portable.pte --rounds 8
    .venv/bin/python bench/interleaved.py gpt2-edgetorch-xnnpack.pte \\
        --choices "" --choices "gemm:128x768x50257=packed" --rounds 10

Inputs come from the ``NAME-inputs.npz`` beside each program (what bench/revisions.py writes into its work
folder, /tmp/edgetorch-bench-revisions). A ``--choices`` variant is the policy's ``kernel_choices``
(``family=kernel`` or ``family:key=kernel``, several joined by ``;``; empty: as tuned). Torch-free: only the
edgetorch runtime is imported.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()


def _inputs(program: str) -> list:
    import numpy as np

    stored = np.load(program.rsplit("-edgetorch-", 1)[0] + "-inputs.npz")
    return [stored[f"arr_{i}"] for i in range(len(stored.files))]


def _choices(text: str) -> dict[str, str]:
    pairs = [item.split("=", 1) for item in text.split(";") if item.strip()]
    if any(len(p) != 2 for p in pairs):
        raise SystemExit(f"--choices expects family[:key]=kernel items joined by ';', got {text!r}")
    return {k.strip(): v.strip() for k, v in pairs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("programs", nargs="+", help="edgetorch .pte files, each with its NAME-inputs.npz beside it")
    parser.add_argument("--choices", action="append", help="a kernel_choices variant (repeat for several)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--per-round", type=int, default=3)
    args = parser.parse_args()

    from edgetorch.runtime import Runtime, policy

    variants = {}
    for program in args.programs:
        for text in args.choices or [""]:
            with policy.using(kernel_choices=_choices(text)):
                method = Runtime.get().load_program(program).load_method("forward", seed=len(variants))
            label = pathlib.Path(program).name + (f" [{text}]" if text else "")
            variants[label] = (method, _inputs(program))
    for method, inputs in variants.values():
        for _ in range(3):  # compiles, pages in, explores the split sites
            method.execute(inputs)
    medians: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(args.rounds):
        for label, (method, inputs) in variants.items():
            times = []
            for _ in range(args.per_round):
                start = time.perf_counter()
                method.execute(inputs)
                times.append(time.perf_counter() - start)
            medians[label].append(statistics.median(times) * 1e3)
    first = statistics.median(next(iter(medians.values())))
    print("| variant | median of rounds, ms | / first | rounds, ms |\n|---|---|---|---|")
    for label, values in medians.items():
        mid = statistics.median(values)
        print(f"| {label} | {mid:.2f} | {mid / first:.3f} | {', '.join(f'{v:.1f}' for v in values)} |")
    assert "torch" not in sys.modules, "the runtime imported torch"


if __name__ == "__main__":
    main()
