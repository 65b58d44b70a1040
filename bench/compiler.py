"""The compiler against ExecuTorch 1.5.1's: planned memory, .pte size and export time, model by model.

Models: the interop test set (tests/interop/models.py) and the bench models.
Both compilers lower the same ``torch.export`` program with portable kernels
only (no delegate, so every intermediate tensor is planned):

- lower bound: the most bytes simultaneously live in edgetorch's schedule
  (``edgetorch.exir.memory_planning.lower_bound``); no plan of that schedule is smaller;
- edgetorch's plan (greedy) and ExecuTorch's plan: the sum of the forward
  method's ``non_const_buffer_sizes``, decoded from each .pte with ``edgetorch.format.pte.load_pte``;
- .pte size, and export time (``to_edge`` + ``to_executorch`` + serialize; best
  of up to 3 runs within 20 s, after a warm-up compile of a tiny model).

Writes bench/results/compiler.md (or OUT/compiler.md):

    .venv/bin/python bench/compiler.py [--models mlp,gpt2] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
import time
import warnings
from collections.abc import Callable

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import executorch.exir  # noqa: E402, F401  (first: it defines dim_order_ops unconditionally; edgetorch reuses it)
import torch  # noqa: E402

from bench import models as bench_models  # noqa: E402
from bench.harness import fmt_bytes, table  # noqa: E402
from bench.suite import error_text, warm_up_compilers  # noqa: E402
from edgetorch.exir.memory_planning import lower_bound  # noqa: E402
from edgetorch.format.pte import load_pte  # noqa: E402
from tests.interop import models as interop_models  # noqa: E402

BENCH_MODELS = ("mlp", "mobilenet_v2", "resnet18", "vit_tiny", "small_transformer", "gpt2", "minilm")
PLAN_EXAMPLE = "interop/mlp"
"""The model whose edgetorch memory plan is printed in full in the report."""


def model_set(quick: bool) -> dict[str, Callable[[], tuple]]:
    """Name -> factory of (module, example_args, dynamic_shapes); interop models are prefixed ``interop/``."""
    out = {f"interop/{n}": _interop(n) for n in interop_models.MODELS}
    for n in BENCH_MODELS[:1] if quick else BENCH_MODELS:
        out[n] = _bench(n)
    return out


def _interop(name: str) -> Callable[[], tuple]:
    factory, args, dynamic = interop_models.MODELS[name]
    return lambda: (factory().eval(), args(), dynamic)


def _bench(name: str) -> Callable[[], tuple]:
    return lambda: (*bench_models.MODELS[name](), None)


def _best_of(fn: Callable[[], object], runs: int = 3, budget_s: float = 20.0) -> tuple[float, object]:
    """The fastest of up to ``runs`` calls (fewer once ``budget_s`` is spent) and the last call's result."""
    best, start = float("inf"), time.perf_counter()
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
        if time.perf_counter() - start > budget_s:
            break
    return best, result


def planned_bytes(pte: bytes) -> int:
    """Sum of the forward method's planned arena sizes, read from the .pte."""
    plans = load_pte(pte).program.execution_plan
    forward = next(p for p in plans if p.name == "forward")
    return sum(forward.non_const_buffer_sizes or [])


def edgetorch_side(ep: torch.export.ExportedProgram) -> dict:
    from edgetorch.exir import to_edge

    def compile_once():
        manager = to_edge(ep).to_executorch()
        return manager, manager.buffer

    seconds, (manager, pte) = _best_of(compile_once)
    plan = manager.memory_plans["forward"]
    arenas = {s.mem_id for s in plan.specs}
    bound = sum(lower_bound([s for s in plan.specs if s.mem_id == m], plan.alignment) for m in arenas)
    return {"export_s": seconds, "bytes": len(pte), "planned": planned_bytes(pte), "lower_bound": bound, "plan": plan}


def executorch_side(ep: torch.export.ExportedProgram) -> dict:
    from executorch.exir import to_edge

    seconds, pte = _best_of(lambda: to_edge(ep).to_executorch().buffer)
    return {"export_s": seconds, "bytes": len(pte), "planned": planned_bytes(pte)}


def compare(name: str, factory: Callable[[], tuple]) -> dict:
    """Both compilers on one model; a side that fails records its error text instead."""
    module, args, dynamic = factory()
    row: dict = {"model": name}
    for side, fn in (("edgetorch", edgetorch_side), ("executorch", executorch_side)):
        try:
            row[side] = fn(torch.export.export(module, tuple(args), dynamic_shapes=dynamic))
        except Exception as e:  # a compiler failing on a model is a result, not the end of the benchmark
            row[side] = {"error": error_text(e)}
    return row


def _ratio(a: int | None, b: int | None) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def report_table(rows: list[dict]) -> str:
    headers = [
        "model",
        "lower bound",
        "edgetorch plan",
        "ExecuTorch plan",
        "edgetorch / bound",
        "edgetorch / ExecuTorch",
        "edgetorch .pte",
        "ExecuTorch .pte",
        "edgetorch export s",
        "ExecuTorch export s",
    ]
    body = []
    for r in rows:
        ours, theirs = r["edgetorch"], r["executorch"]
        if "error" in ours:
            body.append([r["model"], ours["error"], "", fmt_bytes(theirs.get("planned")), "", "", "", "", "", ""])
            continue
        cells = [
            fmt_bytes(ours["lower_bound"]),
            fmt_bytes(ours["planned"]),
            theirs.get("error") or fmt_bytes(theirs["planned"]),
            _ratio(ours["planned"], ours["lower_bound"]),
            _ratio(ours["planned"], theirs.get("planned")),
            fmt_bytes(ours["bytes"]),
            fmt_bytes(theirs.get("bytes")),
            f"{ours['export_s']:.2f}",
            f"{theirs['export_s']:.2f}" if "export_s" in theirs else "-",
        ]
        body.append([r["model"], *cells])
    return table(headers, body)


def write_report(rows: list[dict], out: pathlib.Path, command: str) -> pathlib.Path:
    example = next((r for r in rows if r["model"] == PLAN_EXAMPLE and "plan" in r["edgetorch"]), None)
    parts = [
        "# Compiler: memory plans, .pte size, export time",
        f"Generated by `{command}` on {time.strftime('%Y-%m-%d %H:%M')}.",
        *__doc__.split("\n\n")[1:3],
        report_table(rows),
    ]
    gpt2 = next((r for r in rows if r["model"] == "gpt2"), None)
    if gpt2 and "export_s" in gpt2["edgetorch"] and "export_s" in gpt2["executorch"]:
        ours, theirs = gpt2["edgetorch"]["export_s"], gpt2["executorch"]["export_s"]
        parts.append(
            f"GPT-2 124M export (to_edge + to_executorch): edgetorch {ours:.1f} s, "
            f"ExecuTorch {theirs:.1f} s ({theirs / ours:.1f}x)."
        )
    if example:
        parts += [f"## edgetorch's plan for {PLAN_EXAMPLE}", "```\n" + str(example["edgetorch"]["plan"]) + "\n```"]
    path = out / "compiler.md"
    path.write_text("\n\n".join(parts) + "\n")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: every interop and bench model)")
    parser.add_argument("--quick", action="store_true", help="interop models and the bench MLP only")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    available = model_set(quick=False)
    names = args.models.split(",") if args.models else list(model_set(args.quick))
    unknown = sorted(set(names) - set(available))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {sorted(available)}")
    warm_up_compilers(("edgetorch-portable", "et-portable"))
    rows = []
    for name in names:
        print(f"[compiler] {name}", flush=True)
        rows.append(compare(name, available[name]))
        print(report_table(rows[-1:]).splitlines()[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    path = write_report(rows, args.out, " ".join(["bench/compiler.py", *sys.argv[1:]]))
    print("\n" + report_table(rows) + f"\n\nwrote {path}")


if __name__ == "__main__":
    main()
