"""The edgetorch runtime of two git revisions on the suite's programs, in one run: before/after figures for a
change that claims to cost nothing (a refactor) or to gain something.

The programs are exported once, by the working tree's edgetorch (the file format does not change between the
revisions compared), into ``--workdir``. The older revision is checked out in a folder of this run's own under it
(``git worktree add --detach``, removed at the end with the run's numba and tuning caches). Every measurement
is a fresh process that imports edgetorch from one checkout and no torch: 2 threads, the median wall time of ``--runs`` runs; 1 thread (``EDGETORCH_NUM_THREADS=1``, BLAS on
one thread), the least CPU time (``time.process_time``), which a busy machine disturbs less. Revisions and
programs are taken in turn, ``--rounds`` times, so a change in the machine's load reaches both alike; the table
gives each cell's median over the rounds and the ratio after / before. Each checkout keeps its own numba cache
and tuning cache (an untimed pass fills both before the first round).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/revisions.py --before REV \\
        [--after REV] [--models mobilenet_v2,resnet18] [--rounds 3] [--runs 10]

``--executorch`` adds ExecuTorch's XNNPACK runtime (1.5.1, its C++ runtime through the pybindings) on the
program ExecuTorch's own flow writes from the same export (bench/profile_xnnpack.py lowers it), measured in
the same rounds, each in a fresh process with torch: a third column beside the XNNPACK programs, and the ratio
after / ExecuTorch. (ExecuTorch's thread pool takes the cores it finds; its 1-thread figure is its CPU time.)

``--decode PTE`` measures a language model's decode step instead (a program taking [tokens [1, 1], input_pos
[1]], as ``edgetorch export-llm`` writes with a KV cache): ``--runs`` steps a process at successive positions
after 20 untimed ones, the same statistics per step.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import types
from functools import partial

ROOT = pathlib.Path(__file__).resolve().parents[1]
if "--child" not in sys.argv:  # a child imports edgetorch from the checkout it is given (PYTHONPATH)
    sys.path.insert(0, str(ROOT))
COMPILERS = ("edgetorch-xnnpack", "edgetorch-portable")
SETTINGS = {"2 threads, wall ms": 2, "1 thread, CPU ms": 1}


def child(path: str, threads: int, runs: int, root: str, decode: bool, executorch: bool) -> None:
    """In a fresh process: load the program with the edgetorch of ``root`` (with ``executorch``, ExecuTorch's
    runtime instead), run it ``runs`` times after one warm-up (a decode program: 20 warm-up steps, then ``runs``
    steps at the next positions), print JSON (wall median at 2 threads, CPU minimum at 1)."""
    import time

    import numpy as np

    if executorch:
        method = _executorch_method(path, threads)
    else:
        import edgetorch
        from edgetorch.runtime import Runtime

        here = pathlib.Path(edgetorch.__file__).resolve()
        if not here.is_relative_to(pathlib.Path(root).resolve()):
            raise SystemExit(f"expected edgetorch from {root}, imported {here}")
        method = Runtime.get().load_program(path).load_method("forward")
    if decode:
        token = np.asarray([[42]], np.int64)
        calls = [[token, np.asarray([p], np.int64)] for p in range(20 + runs)]
        for inputs in calls[:20]:
            method.execute(inputs)
        calls = calls[20:]
    else:
        stored = np.load(path.rsplit("-executorch-" if executorch else "-edgetorch-", 1)[0] + "-inputs.npz")
        calls = [[stored[f"arr_{i}"] for i in range(len(stored.files))]] * runs
        method.execute(calls[0])
    wall, cpu = [], []
    for inputs in calls:
        t, c = time.perf_counter(), time.process_time()
        method.execute(inputs)
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    assert executorch or "torch" not in sys.modules, "the runtime imported torch"
    print(json.dumps({"s": statistics.median(wall) if threads > 1 else min(cpu)}))


def _executorch_method(path: str, threads: int):
    """``forward`` of the program at ``path`` on ExecuTorch's runtime, called with NumPy arrays."""
    import torch
    from executorch.runtime import Runtime

    torch.set_num_threads(threads)
    data = pathlib.Path(path).read_bytes()  # ExecuTorch's program reads this buffer as long as it runs
    program = Runtime.get().load_program(data)
    method = program.load_method("forward")
    execute = partial(_execute_torch, method.execute)
    return types.SimpleNamespace(execute=execute, keep=(data, program))


def _execute_torch(execute, inputs):
    """``execute`` (ExecuTorch's) on NumPy ``inputs`` as torch tensors (which share their memory)."""
    import torch

    return execute([torch.from_numpy(a) for a in inputs])


def measure(
    checkout: pathlib.Path,
    path: pathlib.Path,
    threads: int,
    runs: int,
    cache: pathlib.Path,
    decode: bool = False,
    executorch: bool = False,
) -> float:
    env = dict(os.environ, EDGETORCH_NUM_THREADS=str(threads), EDGETORCH_CACHE_DIR=str(cache), EDGETORCH_COMPILE="wait")
    env.update(OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), PYTHONPATH=str(checkout))
    command = [sys.executable, str(ROOT / "bench" / "revisions.py"), "--child", str(path)]
    command += ["--threads", str(threads), "--runs", str(runs), "--root", str(checkout)] + ["--decode-child"] * decode
    command += ["--executorch-child"] * executorch
    out = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{checkout.name} on {path.name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["s"]


def checkout(rev: str, where: pathlib.Path) -> pathlib.Path:
    """``rev`` checked out (detached) under ``where``."""
    path = where / f"rev-{rev}"
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), rev], cwd=ROOT, check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="the older git revision")
    parser.add_argument("--after", help="the newer revision (default: the working tree)")
    parser.add_argument("--models", default="mlp,mobilenet_v2,resnet18,vit_tiny,gpt2,minilm,efficientnet_lite0")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10, help="timed runs a process")
    parser.add_argument("--workdir", default=str(pathlib.Path(tempfile.gettempdir()) / "edgetorch-bench-revisions"))
    parser.add_argument("--decode", help="a language model's .pte: time its decode step instead of the suite")
    parser.add_argument("--executorch", action="store_true", help="also ExecuTorch's XNNPACK runtime on its program")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--decode-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--executorch-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.threads, args.runs, args.root, args.decode_child, args.executorch_child)
        return
    if not args.before:
        parser.error("--before REV is required")
    workdir = pathlib.Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    decode = args.decode is not None
    if decode:
        paths = {(pathlib.Path(args.decode).stem, "decode step"): pathlib.Path(args.decode).resolve()}
    else:
        from bench.tuning import export

        paths = export(args.models.split(","), workdir)  # the programs and their inputs, exported once
    theirs = _executorch_programs(paths, workdir) if args.executorch and not decode else {}
    # This run's checkouts and numba/tuning caches in a folder of its own: two runs sharing --workdir (the
    # exported programs) must not share a worktree or a cache filled by another revision's kernels.
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="run-", dir=workdir))
    trees = {"before": checkout(args.before, run_dir)}
    trees["after"] = checkout(args.after, run_dir) if args.after else ROOT
    made = [tree for tree in trees.values() if tree != ROOT]
    try:
        caches = {side: run_dir / f"cache-{side}" for side in trees}
        for side, tree in trees.items():  # untimed: numba compiles, tuning measures, both cached
            for path in paths.values():
                measure(tree, path, 1, 1, caches[side], decode)
        times: dict[tuple, list[float]] = {}
        loads = []
        for _ in range(args.rounds):
            loads.append(os.getloadavg()[0])
            for key, path in paths.items():
                for setting, threads in SETTINGS.items():
                    for side, tree in trees.items():
                        s = measure(tree, path, threads, args.runs, caches[side], decode)
                        times.setdefault((*key, setting, side), []).append(s)
                    if key in theirs:
                        s = measure(ROOT, theirs[key], threads, args.runs, run_dir, executorch=True)
                        times.setdefault((*key, setting, "executorch"), []).append(s)
    finally:
        for tree in made:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)
    names = {"before": args.before, "after": args.after or "working tree"}
    print(f"load average (1 min) before each round: {', '.join(f'{v:.1f}' for v in loads)}")
    extra = " ExecuTorch XNNPACK | after / ExecuTorch |" if theirs else ""
    print(f"| model | program | setting | {names['before']} | {names['after']} | after / before |{extra}")
    print("|---|---|---|---|---|---|" + "---|---|" * bool(theirs))
    ratios, against = [], []
    for model, compiler in paths:
        for setting in SETTINGS:
            before, after = (statistics.median(times[model, compiler, setting, s]) for s in ("before", "after"))
            ratios.append(after / before)
            program = compiler.removeprefix("edgetorch-")
            row = f"| {model} | {program} | {setting} | {before * 1e3:.2f} | {after * 1e3:.2f} | {ratios[-1]:.3f} |"
            if (model, compiler, setting, "executorch") in times:
                et = statistics.median(times[model, compiler, setting, "executorch"])
                against.append(after / et)
                row += f" {et * 1e3:.2f} | {against[-1]:.2f} |"
            elif theirs:
                row += " | |"
            print(row)
    print(f"geomean after / before: {statistics.geometric_mean(ratios):.3f}")
    if against:
        print(f"geomean after / ExecuTorch XNNPACK: {statistics.geometric_mean(against):.3f}")


def _executorch_programs(paths: dict, workdir: pathlib.Path) -> dict:
    """For each XNNPACK program, the one ExecuTorch's flow writes from the same export (lowered by
    bench/profile_xnnpack.py in a child, its inputs the edgetorch program's): key -> path."""
    theirs = {}
    for model, compiler in paths:
        if compiler != "edgetorch-xnnpack":
            continue
        path = workdir / f"{model}-executorch-xnnpack.pte"
        if not path.exists():
            command = [sys.executable, str(ROOT / "bench" / "profile_xnnpack.py"), "--lower", model, "executorch"]
            subprocess.run([*command, str(path)], cwd=ROOT, check=True)
        theirs[model, compiler] = path
    return theirs


if __name__ == "__main__":
    main()
