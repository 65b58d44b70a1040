"""Kernel choice by measuring the host (edgetorch/runtime/tuning.py): run time and load time of programs with
tuning off, on with an empty cache, and on with a warm cache.

Each measurement is a fresh process on one thread (``EDGETORCH_NUM_THREADS=1``, BLAS on one thread) timing CPU
time (``time.process_time``), so a loaded machine slows the figures less than wall time; the configurations
run in turn, ``--pairs`` times (alternate A/B), and the table gives each one's median. The load average is
recorded before each round.

    .venv/bin/python bench/tuning.py [--models gpt2,mlp] [--pairs 3] [--runs 3] [--workdir DIR]

``--gemm`` instead prints, for bench/gemm.py's shapes (with a ReLU6 clamp and a bias), what tuning measures on
this host (one thread, an empty cache): each candidate's time and the one chosen.
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

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
COMPILERS = ("edgetorch-xnnpack", "edgetorch-portable")
CONFIGS = ("off", "cold", "warm")  # tuning off; on with an empty cache directory; on with the warm one


def export(models: list[str], workdir: pathlib.Path) -> dict[tuple[str, str], pathlib.Path]:
    """Each model's programs, exported once into ``workdir`` (kept between invocations)."""
    paths = {(m, c): workdir / f"{m}-{c}.pte" for m in models for c in COMPILERS}
    if not all(p.exists() for p in paths.values()):
        subprocess.run([sys.executable, __file__, "--export", ",".join(models), "--workdir", str(workdir)], check=True)
    return paths


def export_child(models: list[str], workdir: pathlib.Path) -> None:
    """Write each model's programs and its example inputs (``MODEL-inputs.npz``) into ``workdir``."""
    import executorch.exir  # noqa: F401  (first: it defines dim_order_ops; see bench/suite.py)
    import numpy as np

    from bench.artifacts import export_artifact
    from bench.models import MODELS

    for m in models:
        model, inputs = MODELS[m]()
        np.savez(workdir / f"{m}-inputs.npz", *[x.numpy() for x in inputs])
        for c in COMPILERS:
            export_artifact(c, model, inputs, workdir / m)


def child(path: str, runs: int) -> None:
    """In a fresh process: load the program (timed), run it ``runs`` times (CPU time), print JSON."""
    import time

    import numpy as np

    from edgetorch.runtime import Runtime, tuning

    t0, c0 = time.perf_counter(), time.process_time()
    with tuning.recording() as log:
        method = Runtime.get().load_program(path).load_method("forward")
    load_s, load_cpu = time.perf_counter() - t0, time.process_time() - c0
    stored = np.load(path.rsplit("-edgetorch-", 1)[0] + "-inputs.npz")
    inputs = [stored[f"arr_{i}"] for i in range(len(stored.files))]
    method.execute(inputs)  # warm-up
    times = []
    for _ in range(runs):
        c = time.process_time()
        method.execute(inputs)
        times.append(time.process_time() - c)
    kernels: dict[str, int] = {}
    for _, d in log:
        kernels[d.kernel] = kernels.get(d.kernel, 0) + 1
    print(json.dumps({"load_s": load_s, "load_cpu": load_cpu, "run_cpu": min(times), "kernels": kernels}))


def measure(path: pathlib.Path, config: str, cache: pathlib.Path, runs: int) -> dict:
    env = dict(
        os.environ, EDGETORCH_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", EDGETORCH_COMPILE="wait"
    )
    env["EDGETORCH_TUNE"] = "0" if config == "off" else "1"
    with tempfile.TemporaryDirectory(prefix="edgetorch-tuning-cold-") as cold:
        env["EDGETORCH_CACHE_DIR"] = cold if config == "cold" else str(cache)
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(path), "--runs", str(runs)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return json.loads(out.strip().splitlines()[-1])


def gemm_table() -> None:
    """The decisions tuning takes for bench/gemm.py's shapes, timed now (an empty cache in a temporary dir)."""
    import numpy as np

    from bench.gemm import SHAPES
    from edgetorch.runtime import policy, tuning
    from edgetorch.runtime.kernels import gemm

    rng = np.random.default_rng(0)
    print(f"load average (1 min): {os.getloadavg()[0]:.1f}; one thread; us a call (best of tuning's calls)")
    print("| M x K x N | N timed | packed | sgemm | chosen | packed / chosen |")
    print("|---|---|---|---|---|---|")
    ratios = []
    with tempfile.TemporaryDirectory() as cache, policy.using(tune=True, kernel_choices={}):
        os.environ["EDGETORCH_CACHE_DIR"] = cache
        tuning.forget()
        for m, k, n in SHAPES:
            w = rng.standard_normal((k, n), dtype=np.float32)
            d = gemm.choose_linear(gemm.PackedGemm(w, rng.standard_normal(n, dtype=np.float32), 0.0, 6.0), w, m)
            packed, sgemm = d.times["packed"], d.times["sgemm"]
            ratios.append(packed / min(packed, sgemm))
            timed = min(n, max(gemm.WIDTH, policy.current().tune_macs // (m * k) // gemm.WIDTH * gemm.WIDTH))
            print(f"| {m}x{k}x{n} | {timed} | {packed * 1e6:.0f} | {sgemm * 1e6:.0f} | {d.kernel} | {ratios[-1]:.2f} |")
    print(f"geomean packed / chosen: {statistics.geometric_mean(ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="gpt2")
    parser.add_argument("--pairs", type=int, default=3, help="rounds of the configurations taken in turn")
    parser.add_argument("--runs", type=int, default=3, help="timed runs a process (the minimum is kept)")
    parser.add_argument("--workdir", default=str(pathlib.Path(tempfile.gettempdir()) / "edgetorch-bench-tuning"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--gemm", action="store_true", help="tuning's decisions on bench/gemm.py's shapes")
    args = parser.parse_args()
    if args.gemm:
        gemm_table()
        return
    if args.export:
        export_child(args.export.split(","), pathlib.Path(args.workdir))
        return
    if args.child:
        child(args.child, args.runs)
        return
    workdir = pathlib.Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    models = args.models.split(",")
    paths = export(models, workdir)
    cache = workdir / "cache"
    for path in paths.values():  # the warm cache: each program's decisions measured once beforehand
        measure(path, "warm", cache, 1)
    results: dict[tuple, list[dict]] = {}
    loads = []
    for _ in range(args.pairs):
        loads.append(os.getloadavg()[0])
        for key, path in paths.items():
            for config in CONFIGS:
                results.setdefault((*key, config), []).append(measure(path, config, cache, args.runs))
    print(f"load average (1 min) before each round: {', '.join(f'{v:.1f}' for v in loads)}")
    print("| model | program | tuning | run CPU ms (median) | load s (median) | kernels chosen |")
    print("|---|---|---|---|---|---|")
    for (model, compiler, config), rs in results.items():
        run = statistics.median(r["run_cpu"] for r in rs) * 1e3
        load = statistics.median(r["load_s"] for r in rs)
        kernels = ", ".join(f"{k} {n}" for k, n in sorted(rs[-1]["kernels"].items())) or "-"
        print(f"| {model} | {compiler.removeprefix('edgetorch-')} | {config} | {run:.1f} | {load:.2f} | {kernels} |")


if __name__ == "__main__":
    main()
