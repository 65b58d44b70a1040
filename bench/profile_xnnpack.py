"""edgetorch's XNNPACK runtime against ExecuTorch's native XNNPACK runtime, with a per-node-type profile.

Each model is lowered twice from the same export: by edgetorch (run by edgetorch's runtime) and by the real
ExecuTorch 1.5.1 (run by its C++ runtime). Both run in one process, interleaved, with BLAS on ``--threads``
threads. Then every step of edgetorch's XNNPACK plans is timed and summed by XNNPACK node type, and every
instruction outside the delegates by operator, to show where the time goes.

    .venv/bin/python bench/profile_xnnpack.py [--models mlp,mobilenet_v2,resnet18,vit_tiny,gpt2,minilm] [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import importlib
import math
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import types
from functools import partial

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.harness import ROOT, fmt_ms, module_at, set_threads, table  # noqa: E402
from bench.models import MODELS  # noqa: E402
from edgetorch.runtime.kernels import blas_threads  # noqa: E402

_CACHE = pathlib.Path("/tmp/edgetorch_xnnpack_bench")
_clock = time.perf_counter


def lower(name: str, which: str) -> bytes:
    """The .pte bytes of model ``name`` lowered to XNNPACK by ``which`` ("edgetorch" or "executorch").

    Lowered in a child process (the two compilers share torch's global registries and one lowering can
    upset the other's program) and cached on disk, keyed by the source of edgetorch's XNNPACK lowering.
    """
    lowering = pathlib.Path(__file__).parents[1] / "edgetorch" / "backends" / "xnnpack"
    digest = hashlib.sha1()
    for source in sorted(lowering.glob("**/*.py")):
        part = source.relative_to(lowering).parts[0]
        runtime_half = part in ("runtime.py", "runtime", "fast.py", "qgemm.py")
        if not runtime_half:  # the runtime half does not change the .pte
            digest.update(source.read_bytes())
    key = digest.hexdigest()[:10]
    path = _CACHE / f"{name}-{which}-{key}.pte"
    if not path.exists():
        _CACHE.mkdir(exist_ok=True)
        subprocess.run([sys.executable, __file__, "--lower", name, which, str(path)], check=True)
    return path.read_bytes()


def _lower_child(name: str, which: str, path: str) -> None:
    model, inputs = MODELS[name]()
    exported = torch.export.export(model, inputs)
    if which == "edgetorch":
        import edgetorch.exir
        from edgetorch.backends.xnnpack import XnnpackPartitioner

        manager = edgetorch.exir.to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    else:
        import executorch.exir
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        manager = executorch.exir.to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
    pathlib.Path(path).write_bytes(manager.to_executorch().buffer)


def load_edgetorch(pte: bytes) -> tuple:
    """The loaded method and the XNNPACK delegates its load initialised."""
    from edgetorch.backends.xnnpack.runtime import XnnpackBackend
    from edgetorch.runtime import Runtime

    delegates, init = [], XnnpackBackend.init

    def capture(self, processed, *args):
        handle = init(self, processed, *args)
        delegates.append((handle, handle.xnodes))  # the nodes it compiled (after the load-time rewrites)
        return handle

    XnnpackBackend.init = capture
    try:
        method = Runtime.get().load_program(pte).load_method("forward")
    finally:
        XnnpackBackend.init = init
    return method, delegates


def load_before(pte: bytes, rev: str):
    """The method loaded with the XNNPACK runtime as it was at git revision ``rev`` (its runtime.py, or its
    runtime/ package, with the fast.py and qgemm.py of that revision), for same-run A/B timing."""
    from edgetorch.backends import xnnpack
    from edgetorch.backends.xnnpack import runtime
    from edgetorch.runtime import Runtime
    from edgetorch.runtime.backends import register_backend

    def old(name: str) -> types.ModuleType:
        return module_at(rev, f"edgetorch/backends/xnnpack/{name}.py")

    current = {name: getattr(xnnpack, name) for name in ("fast", "qgemm")}
    package = "edgetorch.backends.xnnpack.runtime"
    modules = {name: m for name, m in sys.modules.items() if name == package or name.startswith(package + ".")}
    try:
        for name in current:  # the old runtime binds the helper modules of its own revision
            setattr(xnnpack, name, old(name))
            sys.modules[f"edgetorch.backends.xnnpack.{name}"] = getattr(xnnpack, name)
        listing = ["git", "ls-tree", "--name-only", rev, "edgetorch/backends/xnnpack/runtime/"]
        files = subprocess.run(listing, cwd=ROOT, check=True, capture_output=True, text=True).stdout.split()
        if not files:
            old("runtime")  # one module; registers the old backend
        else:  # the package, imported under its own name from a copy of that revision's files
            for name in modules:
                del sys.modules[name]
            copy = pathlib.Path(tempfile.gettempdir()) / "edgetorch_bench_revisions" / rev / "xnnpack"
            for path in files:
                text = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True)
                (copy / "runtime").mkdir(parents=True, exist_ok=True)
                (copy / "runtime" / pathlib.Path(path).name).write_bytes(text.stdout)
            xnnpack.__path__.insert(0, str(copy))
            try:
                importlib.import_module(package)  # registers the old backend
            finally:
                xnnpack.__path__.remove(str(copy))
        return Runtime.get().load_program(pte).load_method("forward")
    finally:
        for name, module in current.items():
            setattr(xnnpack, name, module)
            sys.modules[f"edgetorch.backends.xnnpack.{name}"] = module
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]
        sys.modules.update(modules)
        register_backend("XnnpackBackend", runtime.XnnpackBackend())


def interleaved(fns: dict, runs: int, budget_s: float, statistic=statistics.median, clock=None) -> dict:
    """Median (or ``statistic``) seconds of each function, timed in alternation so that machine load hits
    all alike (by ``clock``, this module's ``--clock`` by default)."""
    clock = clock or _clock
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    start = time.perf_counter()
    for _ in range(runs):
        for k, fn in fns.items():
            t0 = clock()
            fn()
            times[k].append(clock() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return {k: statistic(v) for k, v in times.items()}


def node_profile(delegates: list, runs: int) -> tuple[collections.Counter, int]:
    """Median seconds per run of every XNNPACK node type, over all delegates' current plans, and the
    number of steps those plans run."""
    totals, count = collections.Counter(), 0
    for d, nodes in delegates:
        for shapes, old in list(d.schedules.items()):
            kinds = _step_kinds(d, nodes, shapes)
            plan = d.schedules[shapes]
            for dst, src in zip(plan.inputs, old.inputs):  # the last run's inputs, so the steps see real data
                np.copyto(dst, src)
            per_step = [[] for _ in plan.steps]
            with blas_threads.held(plan.own_threads):  # as the delegate's execute: one thread pool at a time
                for _ in range(runs):
                    for i, step in enumerate(plan.steps):
                        t0 = _clock()
                        step()
                        per_step[i].append(_clock() - t0)
            for kind, times in zip(kinds, per_step):
                totals[kind] += statistics.median(times)
            count += len(plan.steps)
    return totals, count


def step_floor(runs: int = 2000) -> float:
    """Seconds a plan spends per step on dispatch alone: a loop over bound ufunc calls on a one-element array."""
    a = np.zeros(1, np.float32)
    steps = [partial(np.add, a, a, out=a)] * runs
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for step in steps:
            step()
        best = min(best, time.perf_counter() - t0)
    return best / runs


# How the profile groups XNNPACK node types (anything else counts as element-wise).
_GEMM = {"FullyConnected", "Conv2d", "DepthwiseConv2d", "ConvTranspose2d", "BatchMatrixMultiply",
         "ScaledDotProductAttention"}  # fmt: skip
_MOVEMENT = {"StaticTranspose", "Copy", "StaticReshape", "StaticSlice", "StaticConstantPad", "Concatenate2",
             "Concatenate3", "Concatenate4", "Concatenate5", "Convert"}  # fmt: skip


def categories(nodes: collections.Counter) -> collections.Counter:
    """The node-type profile summed into GEMM/convolution, element-wise and data movement."""
    out = collections.Counter()
    for kind, seconds in nodes.items():
        out["GEMM/conv" if kind in _GEMM else "data movement" if kind in _MOVEMENT else "element-wise"] += seconds
    return out


def _step_kinds(delegate, nodes: list, shapes: tuple) -> list[str]:
    """The node type of each step of the plan for ``shapes``, rebuilt by planners that label their steps."""
    kinds, planners = [], delegate.planners

    def labelled(planner, kind):
        def plan(env):
            steps = planner(env)
            kinds.extend([kind] * len(steps))
            return steps

        return plan

    delegate.planners = [labelled(p, type(n.xnode_union).__name__.removeprefix("XNN")) for p, n in zip(planners, nodes)]
    try:
        del delegate.schedules[shapes]
        delegate.schedule(shapes)
    finally:
        delegate.planners = planners
    return kinds


def instruction_profile(method, inputs: list, runs: int) -> collections.Counter:
    """Median seconds per run of every non-delegate operator (and of each delegate call as a whole)."""
    from edgetorch.runtime.program import EventTracer

    tracer = EventTracer()
    method.set_event_tracer(tracer)
    per = collections.defaultdict(list)
    for _ in range(runs):
        tracer.clear()
        method.execute(inputs)
        run = collections.Counter()
        for pc, seconds in tracer.events:
            run[method._executor.describe(pc)] += seconds
        for k, v in run.items():
            per[k].append(v)
    method.set_event_tracer(None)
    return collections.Counter({k: statistics.median(v) for k, v in per.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,mobilenet_v2,resnet18,vit_tiny,gpt2,minilm")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget", type=float, default=20.0, help="seconds of end-to-end timing per model")
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--no-profile", action="store_true", help="end-to-end latency only")
    parser.add_argument("--before", metavar="REV", help="also time the runtime as of git revision REV (A/B)")
    parser.add_argument("--lower", nargs=3, metavar=("MODEL", "WHICH", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="cpu: this process's CPU time, steady on a loaded machine for A/B runs at --threads 1",
    )
    parser.add_argument("--min", action="store_true", help="end-to-end: the fastest run, not the median")
    args = parser.parse_args()
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.lower:
        return _lower_child(*args.lower)
    set_threads(args.threads)
    from executorch.runtime import Runtime as EtRuntime

    rows, headers = [], ["model", "edgetorch ms", "ET XNNPACK ms", "ratio", "max |err|"]
    if args.before:
        headers += [f"{args.before} ms", "speed-up"]
    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        with torch.no_grad():
            want = model(*inputs).numpy()
        pte = lower(name, "edgetorch")
        ours, delegates = load_edgetorch(pte)
        et_pte = lower(name, "executorch")
        et_program = EtRuntime.get().load_program(et_pte)  # the method needs its program and bytes alive
        et = et_program.load_method("forward")
        np_inputs, et_inputs = [x.numpy() for x in inputs], list(inputs)
        err = float(np.max(np.abs(ours.execute(np_inputs)[0] - want)))
        fns = {"ours": partial(ours.execute, np_inputs), "et": partial(et.execute, et_inputs)}
        if args.before:
            fns["before"] = partial(load_before(pte, args.before).execute, np_inputs)
        t = interleaved(fns, args.runs, args.budget, min if args.min else statistics.median)
        rows.append([name, fmt_ms(t["ours"]), fmt_ms(t["et"]), f"{t['ours'] / t['et']:.2f}x", f"{err:.1e}"])
        if args.before:
            rows[-1] += [fmt_ms(t["before"]), f"{t['before'] / t['ours']:.2f}x"]
        print(table(headers, rows[-1:]), flush=True)
        if not args.no_profile:
            runs = max(3, min(args.runs, 10))
            nodes, count = node_profile(delegates, runs)
            _print_profile(name, instruction_profile(ours, np_inputs, runs), nodes, args.top)
            _print_summary(name, t["ours"], nodes, count)
    ratios = [float(r[3][:-1]) for r in rows]
    print("\n" + table(headers, rows))
    print(f"geometric-mean ratio {math.exp(statistics.fmean(math.log(r) for r in ratios)):.2f}x")


def _print_profile(name: str, instructions: collections.Counter, nodes: collections.Counter, top: int) -> None:
    total = sum(instructions.values())
    print(f"  {name}: instructions (ms, share of {total * 1e3:.2f} ms)")
    for k, v in instructions.most_common(top):
        print(f"    {k:48s} {v * 1e3:8.3f} {v / total:6.1%}")
    inside = sum(nodes.values())
    print(f"  {name}: XNNPACK node types (ms, share of {inside * 1e3:.2f} ms)")
    for k, v in nodes.most_common(top):
        print(f"    {k:48s} {v * 1e3:8.3f} {v / inside:6.1%}")


def _print_summary(name: str, total: float, nodes: collections.Counter, count: int) -> None:
    """One line for docs/benchmarks.md: the end-to-end time split into kinds of work, and the steps."""
    floor = step_floor()
    inside = sum(nodes.values())
    parts = [f"{k} {v / total:.0%}" for k, v in categories(nodes).most_common()]
    parts.append(f"outside the delegates {max(0.0, total - inside) / total:.0%}")
    print(
        f"  {name}: {fmt_ms(total)} ms = " + ", ".join(parts) + f"; {count} steps, {inside / count * 1e9:,.0f} ns/step "
        f"on average, dispatch floor {floor * 1e9:.0f} ns/step = {count * floor / total:.1%} of the run"
    )


if __name__ == "__main__":
    main()
