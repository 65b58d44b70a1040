"""A/B of the XNNPACK runtime on the vision models (and the rest of the suite's models), each measurement a
fresh process: edgetorch at this checkout, edgetorch at git revision ``--before`` (exported with ``git archive``
into a temporary directory, its own numba cache beside it), and ExecuTorch's XNNPACK runtime on the .pte
ExecuTorch writes, interleaved over ``--rounds`` so that the load of a shared host hits all alike.

Each process loads its program (bench/profile_xnnpack.py lowers and caches the .pte files), runs it once (numba
compiles or loads its kernels, tuning measures), then times ``forward`` for about ``--seconds``: the best and the
median wall time at 2 threads, and with ``--threads 1`` also the process's CPU time a run. Our processes never
import torch (libgomp then spins as the runtime's policy says; ``--spin`` sets ``GOMP_SPINCOUNT`` for every
process instead). Every figure carries the 1-minute load average read before it. Unsets OPENBLAS_*.

    .venv/bin/python bench/vision_ab.py --before main --models mobilenet_v2,efficientnet_lite0 --threads 1,2
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def child(contender: str, pte: str, inputs: str, threads: int, seconds: float) -> None:
    """Print one JSON line: best and median wall ms, and CPU ms a run, of ``forward`` on the saved inputs."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    arrays = [np.load(p) for p in inputs.split(",")]
    threadpool_limits(threads)
    if contender == "executorch":
        import torch
        from executorch.runtime import Runtime

        torch.set_num_threads(threads)
        program = Runtime.get().load_program(pathlib.Path(pte).read_bytes())
        method = program.load_method("forward")
        args = [torch.from_numpy(a) for a in arrays]
    else:
        from edgetorch.runtime import Runtime, set_num_threads

        set_num_threads(threads)
        method = Runtime.get().load_program(pathlib.Path(pte).read_bytes()).load_method("forward")
        args = arrays
    for _ in range(3):
        method.execute(args)
    walls, cpus = [], []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(walls) < 5:
        t0, c0 = time.perf_counter(), time.process_time()
        method.execute(args)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    print(json.dumps({"min": min(walls) * 1e3, "median": statistics.median(walls) * 1e3,
                      "cpu": statistics.median(cpus) * 1e3}))  # fmt: skip


def _load() -> float:
    return os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,efficientnet_lite0")
    parser.add_argument("--before", default="main", help="git revision of the 'before' runtime")
    parser.add_argument("--threads", default="2", help="comma-separated thread counts")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--spin", help="GOMP_SPINCOUNT for every process (default: each runtime's own)")
    parser.add_argument("--no-executorch", action="store_true")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        contender, pte, inputs, threads, seconds = args.child
        return child(contender, pte, inputs, int(threads), float(seconds))
    work = pathlib.Path(tempfile.mkdtemp(prefix="vision_ab_"))
    before = work / "before"
    before.mkdir()
    archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(before)], input=archive, check=True)
    trees = {"after": ROOT, "before": before}
    programs = _programs(args.models.split(","), work)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    if args.spin is not None:
        env["GOMP_SPINCOUNT"] = args.spin
    contenders = ["after", "before"] + ([] if args.no_executorch else ["executorch"])
    results: dict = {}
    for r in range(args.rounds):
        for model, (ours, theirs, inputs) in programs.items():
            for threads in map(int, args.threads.split(",")):
                for contender in contenders:
                    tree = trees.get(contender, ROOT)
                    child_env = dict(env, PYTHONPATH=str(tree), EDGETORCH_CACHE_DIR=str(work / f"cache-{contender}"))
                    pte = theirs if contender == "executorch" else ours
                    load = _load()
                    cmd = [sys.executable, str(tree / "bench" / "vision_ab.py") if contender == "before" else __file__]
                    if contender == "before" and not (tree / "bench" / "vision_ab.py").exists():
                        cmd = [sys.executable, __file__]
                    cmd += ["--child", contender, str(pte), inputs, str(threads), str(args.seconds)]
                    out = subprocess.run(cmd, env=child_env, check=True, capture_output=True, text=True).stdout
                    got = json.loads(out.strip().splitlines()[-1])
                    got["load"] = load
                    results.setdefault((model, threads, contender), []).append(got)
                    print(f"round {r} {model} {threads}t {contender}: min {got['min']:.3f} median "
                          f"{got['median']:.3f} cpu {got['cpu']:.3f} ms (load {load:.2f})", flush=True)  # fmt: skip
    _report(results, contenders)


def _programs(models: list[str], work: pathlib.Path) -> dict:
    """Each model's (edgetorch .pte, ExecuTorch .pte, saved inputs), lowered in a child with torch."""
    code = (
        "import sys, numpy as np\n"
        "from bench.profile_xnnpack import lower\n"
        "from bench.models import MODELS\n"
        "for name in sys.argv[2:]:\n"
        "    model, inputs = MODELS[name]()\n"
        "    paths = []\n"
        "    for i, x in enumerate(inputs):\n"
        "        paths.append(f'{sys.argv[1]}/{name}-{i}.npy'); np.save(paths[-1], x.numpy())\n"
        "    for which in ('edgetorch', 'executorch'):\n"
        "        open(f'{sys.argv[1]}/{name}-{which}.pte', 'wb').write(lower(name, which))\n"
        "    open(f'{sys.argv[1]}/{name}.inputs', 'w').write(','.join(paths))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(work), *models], cwd=ROOT, check=True)
    return {
        m: (work / f"{m}-edgetorch.pte", work / f"{m}-executorch.pte", (work / f"{m}.inputs").read_text())
        for m in models
    }


def _report(results: dict, contenders: list[str]) -> None:
    print("\n| model | threads | contender | best ms (min over rounds) | median ms | CPU ms a run | load |")
    print("|---|---|---|---|---|---|---|")
    for (model, threads, contender), runs in results.items():
        best = min(r["min"] for r in runs)
        median = statistics.median(r["median"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        loads = f"{min(r['load'] for r in runs):.1f}-{max(r['load'] for r in runs):.1f}"
        print(f"| {model} | {threads} | {contender} | {best:.3f} | {median:.3f} | {cpu:.3f} | {loads} |")
    print("\nRatios (best ms, min over rounds):")
    for model, threads in sorted({(m, t) for m, t, _ in results}):
        best = {c: min(r["min"] for r in results[(model, threads, c)]) for c in contenders}
        parts = [f"after/before {best['after'] / best['before']:.2f}"]
        if "executorch" in best:
            parts += [
                f"after/ET {best['after'] / best['executorch']:.2f}",
                f"before/ET {best['before'] / best['executorch']:.2f}",
            ]
        print(f"  {model} {threads}t: " + ", ".join(parts))


if __name__ == "__main__":
    main()
