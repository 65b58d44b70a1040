"""LLM prefill tokens/s by prompt length and thread count, first call and warm, with the load average.

Each thread count runs in a process of its own (BLAS pinned before the runtime loads). For each prompt
length the runner is reset and the prompt fed ``--repeats`` times: the first call pays the compiles and
tuning a new row count triggers, the later ones do not, so the gap between ``first`` and ``best`` is the
first-call cost that ``edgetorch llm run`` (one prompt, no warm-up) shows and ``bench/llm.py`` (warmed up)
does not. ``cpu`` is the process's CPU time per warm call (user + system), less sensitive than wall time to
other processes on a shared host. Example::

    python bench/llm_prefill.py --pte /tmp/smol8da4w_sdpa.pte --gguf SmolLM2.gguf --threads 1 2

Prompts longer than the program's ``get_max_seq_len`` go in chunks of it (as the runner feeds them); a
length must stay under ``get_max_context_len``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import reexec_with_clean_blas_env, set_threads  # noqa: E402


def worker(pte: str, gguf: str, threads: int, lengths: list[int], repeats: int) -> list[dict]:
    set_threads(threads, with_torch=False)
    from edgetorch.extension.llm.runner import TextLLMRunner

    runner = TextLLMRunner(pte, gguf)
    runner.load()
    vocab = int(runner.metadata.get("get_vocab_size", 1000))
    rows = []
    for length in lengths:
        ids = [(17 * i + 5) % vocab for i in range(length)]
        walls, cpus = [], []
        for _ in range(repeats):
            runner.reset()
            c0, t0 = time.process_time(), time.perf_counter()
            runner._prefill(ids)
            walls.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)
        warm = walls[1:] or walls
        rows.append(
            {
                "threads": threads,
                "tokens": length,
                "first_tps": length / walls[0],
                "best_tps": length / min(warm),
                "cpu_tps": length / min(cpus[1:] or cpus),
                "load": os.getloadavg()[0],
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pte", required=True)
    parser.add_argument("--gguf", required=True, help="the tokenizer source (GGUF or tokenizer file)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 32, 128, 480])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.pte, args.gguf, args.worker, args.lengths, args.repeats)))
        return
    reexec_with_clean_blas_env()
    print("| threads | tokens | first tok/s | warm tok/s | warm tok/CPU-s | load avg |")
    print("|---|---|---|---|---|---|")
    for threads in args.threads:
        cmd = [sys.executable, __file__, "--pte", args.pte, "--gguf", args.gguf, "--worker", str(threads)]
        cmd += ["--repeats", str(args.repeats), "--lengths", *map(str, args.lengths)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for r in json.loads(out.strip().splitlines()[-1]):
            print(
                f"| {r['threads']} | {r['tokens']} | {r['first_tps']:.0f} | {r['best_tps']:.0f} | "
                f"{r['cpu_tps']:.0f} | {r['load']:.2f} |"
            )


if __name__ == "__main__":
    main()
