"""Noisy neighbours: busy processes beside a benchmark, and an A/B driver of thread counts under them.

``with neighbours(n):`` starts ``n`` processes that spin in a tight loop (each pinned to one core with
``os.sched_setaffinity`` where the OS allows it, the last cores first) and stops them when the block ends; it yields
a line that says how many and where, for the report. Other benches import it.

Run as a script it measures a program at several thread counts, quiet and beside neighbours, each setting in a
fresh process and the settings interleaved over ``--rounds`` (on a shared machine the load drifts: every figure
carries the 1-minute load average read just before it)::

    .venv/bin/python bench/noisy.py --pte /tmp/smol8da4w.pte --gguf SmolLM2.gguf --threads 1,2 --neighbours 0,1
    .venv/bin/python bench/noisy.py --pte /tmp/mlp.pte --threads 1,2 --neighbours 0,1

With ``--gguf`` the program is an LLM and the figure is decode tok/s (bench/llm.py's worker, ``--new-tokens``);
otherwise the figure is the median ms of ``forward`` on zeros over about ``--seconds`` of runs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_SPIN = "while True:\n    pass\n"


def _cores() -> list[int]:
    affinity = getattr(os, "sched_getaffinity", None)
    return sorted(affinity(0)) if affinity is not None else list(range(os.cpu_count() or 1))


@contextlib.contextmanager
def neighbours(n: int, cores: list[int] | None = None) -> Iterator[str]:
    """``n`` busy processes for the block's duration, pinned round-robin to ``cores`` (default: this process's
    CPUs, last first, so that one neighbour shares the core a 2-thread run's second thread takes)."""
    if n <= 0:
        yield "no neighbours"
        return
    where = cores if cores else list(reversed(_cores()))
    procs: list[subprocess.Popen] = []
    placed: list[str] = []
    try:
        for i in range(n):
            proc = subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL)
            procs.append(proc)
            core = where[i % len(where)]
            try:
                os.sched_setaffinity(proc.pid, {core})
                placed.append(str(core))
            except (AttributeError, OSError):
                placed.append("any")
        time.sleep(0.2)  # let them start spinning
        yield f"{n} busy neighbour process(es) on core(s) {','.join(placed)}"
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def _program_worker(pte: str, threads: int, seconds: float) -> dict:
    from bench.harness import median_time, set_threads

    set_threads(threads, with_torch=False)
    import numpy as np

    from edgetorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    meta = method.metadata
    inputs = []
    for i in range(meta.num_inputs()):
        info = meta.input_tensor_meta(i)
        inputs.append(np.zeros(tuple(info.sizes()), info.numpy_dtype))
    ms = 1e3 * median_time(lambda: method.execute(inputs), min_runs=5, budget_s=4 * seconds, warmup=2)
    return {"ms": ms}


def _llm_worker(pte: str, gguf: str, threads: int, new_tokens: int) -> dict:
    from bench.llm import worker_ours

    r = worker_ours(pte, gguf, new_tokens, threads)
    return {"decode_tps": r["decode_tps"], "prefill_tps": r["prefill_tps"]}


def _one(args: argparse.Namespace, threads: int, spin: str = "") -> dict:
    cmd = [sys.executable, __file__, "--pte", args.pte, "--worker", str(threads), "--seconds", str(args.seconds)]
    cmd += ["--new-tokens", str(args.new_tokens)] + (["--gguf", args.gguf] if args.gguf else [])
    cmd += ["--fixed-split"] if args.fixed_split else []
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("GOMP_SPINCOUNT", None)
    if spin:  # else the runtime's own choice (runtime/policy.py SPIN_COUNT)
        env["GOMP_SPINCOUNT"] = spin
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pte", required=True)
    parser.add_argument("--gguf", help="an LLM's GGUF (tokenizer): measure decode tok/s with bench/llm.py's worker")
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--neighbours", default="0,1", help="neighbour counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved repetitions of every setting")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=2.0, help="a float program's timing budget per setting")
    parser.add_argument("--json", help="also write the runs here")
    parser.add_argument(
        "--fixed-split", action="store_true", help="split whenever there are threads (policy split_adapts off)"
    )
    parser.add_argument(
        "--spin",
        default="",
        help="GOMP_SPINCOUNT values to compare, comma-separated (default: the runtime's own setting only)",
    )
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        if args.fixed_split:
            from edgetorch.runtime import policy

            policy.install(dataclasses.replace(policy.current(), split_adapts=False))
        if args.gguf:
            print(json.dumps(_llm_worker(args.pte, args.gguf, args.worker, args.new_tokens)))
        else:
            print(json.dumps(_program_worker(args.pte, args.worker, args.seconds)))
        return
    spins = args.spin.split(",") if args.spin else [""]
    settings = list(
        itertools.product(
            [int(n) for n in args.neighbours.split(",")], [int(t) for t in args.threads.split(",")], spins
        )
    )
    key = "decode_tps" if args.gguf else "ms"
    runs: list[dict] = []
    for r in range(args.rounds):
        for n, t, spin in settings if r % 2 == 0 else reversed(settings):
            with neighbours(n) as where:
                load = os.getloadavg()[0]
                got = _one(args, t, spin)
            runs.append({"neighbours": n, "threads": t, "spin": spin or "runtime", "load": load, "where": where, **got})
            said = f", GOMP_SPINCOUNT={spin}" if spin else ""
            print(
                f"round {r}: {where}, {t} thread(s){said}, load {load:.2f}: {got.get(key, got.get('error'))}",
                flush=True,
            )
    unit = "decode tok/s" if args.gguf else "ms a run (median)"
    adapt = "fixed split" if args.fixed_split else "adaptive split"
    print(f"\n{Path(args.pte).name}, {unit}, {adapt}, {args.rounds} interleaved round(s); load = 1-min load average")
    print("| neighbours | threads | GOMP_SPINCOUNT | runs (load) | median |\n|---|---|---|---|---|")
    for n, t, spin in settings:
        mine = [x for x in runs if (x["neighbours"], x["threads"], x["spin"]) == (n, t, spin or "runtime") and key in x]
        cells = ", ".join(f"{x[key]:.1f} ({x['load']:.1f})" for x in mine)
        med = f"{statistics.median(x[key] for x in mine):.1f}" if mine else "-"
        print(f"| {n} | {t} | {spin or 'runtime'} | {cells} | {med} |")
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
