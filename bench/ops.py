"""Per-operator time: edgetorch's portable kernels against ExecuTorch's, on the operators that dominate the models.

For each benchmark model (written by ExecuTorch 1.5.1 with `to_edge(...).to_executorch()`), the
edgetorch runtime's event tracer ranks operators by total time. For the 20 heaviest operators
overall, the most expensive call is cut out of its program into a one-instruction .pte (same
values, same planned memory; written with edgetorch.format), which both runtimes then time.

    .venv/bin/python bench/ops.py [--models mobilenet_v2,resnet18,small_transformer,gpt2] [--top 20]
"""

from __future__ import annotations

import argparse
import collections
import copy
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.harness import fmt_ms, median_time, set_threads, table  # noqa: E402
from bench.models import MODELS  # noqa: E402
from edgetorch.format import program as fbp  # noqa: E402
from edgetorch.format.pte import load_pte, save_pte  # noqa: E402
from edgetorch.runtime import EventTracer, Runtime  # noqa: E402
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY  # noqa: E402
from edgetorch.runtime.kernels.registry import lookup  # noqa: E402

# Idle pause before each timing, so worker threads of the previous contender (torch, ExecuTorch, BLAS) park.
SETTLE_S = 0.5


def one_instruction(pte: bytes, pc: int) -> tuple[bytes, list[np.ndarray]] | None:
    """A program running only instruction ``pc`` of ``pte``'s forward, with random inputs for it."""
    f = load_pte(pte)
    prog = copy.deepcopy(f.program)
    segments = [bytes(f.segment(i)) for i in range(len(f.program.segments))]
    plan = prog.execution_plan[0]
    ins = plan.chains[0].instructions[pc]
    call = ins.instr_args
    if not isinstance(call, fbp.KernelCall):
        return None
    op = plan.operators[call.op_index]
    name = f"{op.name}.{op.overload}" if op.overload else op.name
    _fn, nargs = lookup(name)
    params, rets = call.args[:nargs], call.args[nargs:]
    inputs, arrays = [], []
    for j in params:
        t = plan.values[j].val
        if isinstance(t, fbp.Tensor) and t.allocation_info is not None and j not in rets and j not in inputs:
            inputs.append(j)
            dtype = SCALAR_TO_NUMPY[t.scalar_type]
            shape = [int(s) for s in t.sizes]
            arrays.append(
                np.zeros(shape, dtype)
                if dtype.kind in "iub"
                else np.random.default_rng(0).standard_normal(shape).astype(dtype)
            )
    if not rets or any(not isinstance(plan.values[j].val, fbp.Tensor) for j in rets):
        return None
    plan.inputs, plan.outputs = inputs, list(dict.fromkeys(rets))
    plan.chains[0].instructions = [ins]
    plan.chains[0].stacktrace = None
    return save_pte(prog, segments), arrays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet_v2,resnet18,small_transformer,gpt2")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument(
        "--threads", type=int, default=1, help="BLAS/torch threads (ExecuTorch's portable kernels use one)"
    )
    args = parser.parse_args()
    set_threads(args.threads)
    from executorch.exir import to_edge
    from executorch.runtime import Runtime as EtRuntime

    totals: collections.Counter[str] = collections.Counter()
    heaviest: dict[str, tuple[float, bytes, int, str]] = {}
    for model_name in args.models.split(","):
        model, inputs = MODELS[model_name]()
        pte = to_edge(torch.export.export(model, inputs)).to_executorch().buffer
        method = Runtime.get().load_program(pte).load_method("forward")
        x = [t.numpy() for t in inputs]
        method.execute(x)
        tracer = EventTracer()
        method.set_event_tracer(tracer)
        for _ in range(3):
            method.execute(x)
        per_pc: collections.Counter[int] = collections.Counter()
        for pc, seconds in tracer.events:
            per_pc[pc] += seconds / 3
        describe = method._executor.describe
        for pc, seconds in per_pc.items():
            op = describe(pc)
            totals[op] += seconds
            if seconds > heaviest.get(op, (0.0,))[0]:
                heaviest[op] = (seconds, pte, pc, model_name)
        print(f"[bench] profiled {model_name}", flush=True)
    rows = []
    for op, total in totals.most_common(args.top):
        _t, pte, pc, model_name = heaviest[op]
        cut = one_instruction(pte, pc)
        if cut is None:
            continue
        single, arrays = cut
        ours = Runtime.get().load_program(single).load_method("forward")
        time.sleep(SETTLE_S)
        t_ours = median_time(lambda m=ours, a=arrays: m.execute(a), min_runs=5, budget_s=5)
        try:
            theirs = EtRuntime.get().load_program(single).load_method("forward")
            tensors = [torch.from_numpy(a) for a in arrays]
            time.sleep(SETTLE_S)
            t_et = median_time(lambda m=theirs, a=tensors: m.execute(a), min_runs=3, budget_s=20)
            ratio = f"{t_et / t_ours:.1f}x"
        except Exception as e:  # an operator ExecuTorch's portable library lacks, for example
            t_et, ratio = None, f"ExecuTorch: {type(e).__name__}"
        rows.append([op, model_name, f"{total * 1e3:.2f}", fmt_ms(t_ours), fmt_ms(t_et), ratio])
        print(
            table(
                [
                    "operator",
                    "heaviest call in",
                    "edgetorch total ms/run",
                    "edgetorch ms",
                    "ET portable ms",
                    "speed-up",
                ],
                rows[-1:],
            ),
            flush=True,
        )
    out = table(
        ["operator", "heaviest call in", "edgetorch total ms/run", "edgetorch ms", "ET portable ms", "speed-up"], rows
    )
    print("\n" + out)
    results = pathlib.Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "ops.md").write_text(
        "# Per-operator time: edgetorch vs ExecuTorch portable kernels\n\n"
        f"The {args.top} operators with the most edgetorch time over {args.models}; each timed on its heaviest call,\n"
        f"cut into a one-instruction .pte and run by both runtimes ({args.threads} threads, median).\n"
        "Command: `.venv/bin/python bench/ops.py`\n\n" + out + "\n"
    )


if __name__ == "__main__":
    main()
