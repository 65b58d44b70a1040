"""The benchmark suite: edgetorch against ExecuTorch 1.5.1, ONNX Runtime and PyTorch eager, in one process.

Per model, six contenders, each timed as the median of three rounds (every contender in turn) in this one process on the
same threads: edgetorch's runtime on edgetorch's XNNPACK and portable .pte
files, ExecuTorch's runtime on ExecuTorch's XNNPACK and portable .pte files,
ONNX Runtime on a ``torch.onnx.export`` model, and PyTorch eager; each one's
max |error| against eager; both compilers' export time (``to_edge``/lowering +
``to_executorch``) and .pte size. Then import time and peak memory of the
runtimes in fresh processes (bench/footprint.py). A contender that fails keeps
its error text in its table cell; the suite goes on.

Writes OUT/RESULTS.md, OUT/results/suite.json and OUT/results/{latency,ratios}.png (OUT defaults to bench/):

    .venv/bin/python bench/suite.py [--models mlp,gpt2] [--quick] [--out DIR]
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import pathlib
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import executorch.exir  # noqa: E402, F401  (first: it defines dim_order_ops unconditionally; edgetorch reuses it)
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench import footprint, plots  # noqa: E402
from bench.artifacts import COMPILE, export_artifact  # noqa: E402
from bench.harness import fmt_ms, median_time, set_threads, table  # noqa: E402
from bench.models import MODELS  # noqa: E402
from bench.plots import COMPARISONS, CONTENDERS, LABELS, comparison_label, geomean, ratios  # noqa: E402

SUITE_MODELS = ("mlp", "mobilenet_v2", "resnet18", "vit_tiny", "gpt2", "minilm", "efficientnet_lite0")
COMPILERS = ("edgetorch-xnnpack", "edgetorch-portable", "et-xnnpack", "et-portable")


WHAT = {
    "edgetorch-xnnpack": "edgetorch's NumPy runtime on the .pte edgetorch writes with its XNNPACK partitioner "
    "(delegate blobs run by edgetorch's own XNNPACK runtime half)",
    "edgetorch-portable": "edgetorch's NumPy runtime on the .pte edgetorch writes without delegation",
    "et-xnnpack": "ExecuTorch 1.5.1's C++ runtime (pybindings) on the .pte ExecuTorch writes with its XNNPACK partitioner",
    "et-portable": "ExecuTorch 1.5.1's C++ runtime with its portable kernels on the .pte ExecuTorch writes without "
    "delegation",
    "ort": "ONNX Runtime (CPU provider, intra-op threads = the suite's threads) on `torch.onnx.export(dynamo=True)`'s model",
    "eager": "the PyTorch module itself under `torch.inference_mode()`: the numerical oracle",
}


@dataclass(frozen=True)
class Budget:
    """How long to time one contender: at least ``min_runs`` timed runs, stopping once ``seconds`` have passed."""

    min_runs: int
    seconds: float


FULL = Budget(5, 10.0)
SLOW = Budget(2, 40.0)
"""ExecuTorch's portable kernels take ~18 s per GPT-2 run; two runs is what a budget allows."""
QUICK = Budget(1, 1.0)
SETTLE_S = 1.0
ROUNDS = 3  # rounds of every contender in turn, per model (bench_model)
"""Idle pause before timing a contender. Thread pools spin after work (OpenBLAS's, torch's OpenMP); right after
torch ran, edgetorch's BLAS calls were measured ~100x slower on 2 cores, and the other way round."""


def load_runner(contender: str, path: str | None, model: torch.nn.Module, inputs: tuple) -> Callable[[], object]:
    """A no-argument function running one inference with ``contender``; it returns the first output."""
    if contender.startswith("edgetorch-"):
        from edgetorch.runtime import Runtime

        method = Runtime.get().load_program(path).load_method("forward")
        arrays = [x.numpy() for x in inputs]
        return lambda: method.execute(arrays)[0]
    if contender.startswith("et-"):
        from executorch.runtime import Runtime as EtRuntime

        et_method = EtRuntime.get().load_program(path).load_method("forward")
        return lambda: et_method.execute(list(inputs))[0]
    if contender == "ort":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
        return lambda: session.run(None, feed)[0]

    def eager() -> torch.Tensor:
        with torch.inference_mode():
            return model(*inputs)

    return eager


def max_abs_err(got: object, want: np.ndarray) -> float:
    """Largest absolute difference from the eager output; raises ValueError when the shapes differ."""
    got = np.asarray(got, dtype=np.float32)
    if got.shape != want.shape:
        raise ValueError(f"output shape {list(got.shape)} differs from eager's {list(want.shape)}")
    return float(np.max(np.abs(got - want))) if want.size else 0.0


def error_text(e: BaseException) -> str:
    """A table-safe one-line summary of a failure."""
    first = (str(e).strip().splitlines() or [""])[0]
    text = f"error: {type(e).__name__}: {first}".replace("|", "/")
    return (text[:117] + "...") if len(text) > 120 else text


def prepare(c: str, name: str, model: torch.nn.Module, inputs: tuple, want: np.ndarray, res: dict, workdir) -> Callable:
    """Export (timed) and load ``c``'s artifact, run it once against eager; returns the runner, records into ``res``."""
    path = None
    if c != "eager":
        artifact = export_artifact(c, model, inputs, workdir / name)
        path = artifact["path"]
        res["artifacts"][c], res["export_s"][c], res["bytes"][c] = path, artifact["export_s"], artifact["bytes"]
    run = load_runner(c, path, model, inputs)
    res["max_err"][c] = max_abs_err(run(), want)  # this first run is also the warm-up
    return run


def bench_model(name: str, contenders: tuple[str, ...], budget: Budget, workdir: pathlib.Path) -> dict:
    """Export, check and load every contender on one model, then time them in ``ROUNDS`` rounds, each round
    every contender in turn (ExecuTorch's portable kernels once, after the rounds); a contender's latency is the
    median of its round medians. This host has spells of 10-16 s in which everything runs 30-50% slower
    (docs/benchmarks.md); timed once each, whichever contender fell in a spell looked slow. Failures become
    error strings."""
    model, inputs = MODELS[name]()
    with torch.inference_mode():
        want = model(*inputs).numpy()
    res: dict = {"latency_ms": {}, "max_err": {}, "errors": {}, "export_s": {}, "bytes": {}, "artifacts": {}}
    res["inputs"] = [[list(x.shape), str(x.numpy().dtype)] for x in inputs]
    runners: dict[str, Callable] = {}
    for c in contenders:
        print(f"[suite] {name}: {LABELS[c]}", flush=True)
        try:
            runners[c] = prepare(c, name, model, inputs, want, res, workdir)
        except Exception as e:  # one contender's failure is a result, not the end of the suite
            res["errors"][c] = error_text(e)
            print(f"[suite]   {res['errors'][c]}", flush=True)
    rounds: dict[str, list[float]] = {c: [] for c in runners}
    slow = [c for c in runners if c == "et-portable" and budget == FULL]
    for r in range(ROUNDS):
        for c in runners:
            if c in slow and r:
                continue
            b = SLOW if c in slow else Budget(budget.min_runs, budget.seconds / ROUNDS)
            try:
                time.sleep(SETTLE_S)
                rounds[c].append(median_time(runners[c], b.min_runs, b.seconds, warmup=1))
            except Exception as e:
                res["errors"][c] = error_text(e)
    for c, times in rounds.items():
        if c not in res["errors"] and times:
            res["latency_ms"][c] = 1e3 * statistics.median(times)
            print(f"[suite] {name}: {LABELS[c]} {fmt_ms(res['latency_ms'][c] / 1e3)} ms "
                  f"(rounds {', '.join(fmt_ms(t) for t in times)}), max |err| {res['max_err'][c]:.1e}", flush=True)  # fmt: skip
    runners.clear()
    gc.collect()
    return res


def _cell(res: dict, c: str, value: Callable[[dict, str], str]) -> str:
    if c in res["errors"]:
        return res["errors"][c]
    return value(res, c)


def latency_table(results: dict) -> str:
    cs = results["contenders"]
    rows = [
        [m, *(_cell(r, c, lambda r, c: fmt_ms(r["latency_ms"][c] / 1e3)) for c in cs)]
        for m, r in results["models"].items()
    ]
    return table(["model", *(f"{LABELS[c]} ms" for c in cs)], rows)


def error_table(results: dict) -> str:
    cs = results["contenders"]
    rows = [
        [m, *(_cell(r, c, lambda r, c: f"{r['max_err'][c]:.1e}") for c in cs)] for m, r in results["models"].items()
    ]
    return table(["model", *(LABELS[c] for c in cs)], rows)


def ratio_table(results: dict, comparisons: tuple[tuple[str, str], ...] = COMPARISONS) -> str:
    """Per-model time ratios ours / theirs and their geometric means; blank where either side failed."""
    columns = [ratios(results, ours, theirs) for ours, theirs in comparisons]
    rows = [[m, *(f"{col[m]:.3g}" if m in col else "-" for col in columns)] for m in results["models"]]
    means = [geomean(list(col.values())) for col in columns]
    rows.append(["**geomean**", *(f"**{g:.3g}**" if g else "-" for g in means)])
    return table(["model", *(comparison_label(o, t) for o, t in comparisons)], rows)


def export_table(results: dict) -> str:
    cs = [c for c in results["contenders"] if c != "eager"]
    rows = []
    for m, r in results["models"].items():
        cells = [f"{r['export_s'][c]:.2f} s, {r['bytes'][c] / 1e6:.2f} MB" if c in r["export_s"] else "-" for c in cs]
        rows.append([m, *cells])
    return table(["model", *(LABELS[c] for c in cs)], rows)


def failures(results: dict) -> list[str]:
    return [f"{m} / {LABELS[c]}: {e}" for m, r in results["models"].items() for c, e in r["errors"].items()]


def write_report(results: dict, out: pathlib.Path) -> pathlib.Path:
    """Write RESULTS.md, results/suite.json and the plots under ``out``; returns the RESULTS.md path."""
    res_dir = out / "results"
    res_dir.mkdir(parents=True, exist_ok=True)
    saved = {
        **results,
        "models": {m: {k: v for k, v in r.items() if k != "artifacts"} for m, r in results["models"].items()},
    }
    (res_dir / "suite.json").write_text(json.dumps(saved, indent=1))
    plots.draw(results, res_dir)
    meta = results["meta"]
    fails = failures(results)
    host = meta.get("host") or meta["cpu"]
    parts = [
        f"## Suite on {meta['cpu']}" + (f" ({meta['cpu_class']})" if meta.get("cpu_class") else ""),
        f"Generated by `{meta['command']}` on {meta['date']} on {host}, {meta['threads']} threads, "
        f"torch {meta['torch']}, executorch {meta['executorch']}, onnxruntime {meta['onnxruntime']}"
        f"{', QUICK mode: 1 run each, numbers are indicative only' if meta['quick'] else ''}. "
        "Every contender runs in one process on the same threads; latency is the median over 3 rounds (every "
        "contender in turn, each round) of the median wall time of one inference after one warm-up run and a 1 s "
        "idle pause (so the previous contender's spinning worker threads "
        "have parked); at least 5 runs a round (ExecuTorch portable: one round of 2 runs within 40 s). The 1-minute load average was "
        f"{meta['load_average_start']} at the start and {meta['load_average_end']} at the end: with more runnable "
        "processes than cores, multi-threaded runtimes wait at every barrier for a descheduled thread, so a high "
        "load inflates all numbers, PyTorch eager's most. edgetorch's compiled kernels ran their parallel loops "
        f"on numba's {meta.get('numba_layer', 'unrecorded')} threading layer (tbb: the tbb wheel of "
        "edgetorch[fast], docs/benchmarks.md 'numba on TBB'). torch loads libgomp before edgetorch is imported, "
        f"so OpenMP workers (torch's, and numba's on its omp layer) spin as GOMP_SPINCOUNT="
        f"{meta.get('gomp_spincount', 'unset')} says (unset: libgomp's default, 300,000); a torch-free edgetorch "
        "process spins 0 (docs/benchmarks.md, 'How long a worker spins'). Each CPU the suite runs on keeps a "
        "section of its own in this file; a run replaces only its own CPU's.",
        "### Contenders\n\n" + "\n".join(f"- **{LABELS[c]}**: {WHAT[c]}" for c in results["contenders"]),
        "### Time ratios",
        "edgetorch's time divided by the other's: **below 1 means edgetorch is faster**. Geometric mean over "
        "the models where both ran.",
        ratio_table(results),
        "![time ratios](results/ratios.png)",
        "### Latency (ms)",
        latency_table(results),
        "![latency](results/latency.png)",
        "### Max |error| against PyTorch eager",
        error_table(results),
        "### Export time and file size",
        "`to_edge` (or `to_edge_transform_and_lower` with the XNNPACK partitioner) + `to_executorch` + serialize, "
        "from the same `torch.export` program; ONNX: `torch.onnx.export(dynamo=True)` including its own export. "
        "Size is the .pte file (ONNX: model + external data).",
        export_table(results),
    ]
    if results.get("footprint"):
        fp = results["footprint"]
        parts += [
            "### Import time and peak memory",
            footprint.describe(fp["model"]),
            footprint.report_table(fp["rows"]),
        ]
    compiler_md = out / "results" / "compiler.md"
    parts.append(
        "### Compiler\nMemory plans, .pte sizes and export times against ExecuTorch: "
        + (
            "[results/compiler.md](results/compiler.md) (`bench/compiler.py`)."
            if compiler_md.exists()
            else "run `bench/compiler.py`."
        )
    )
    if fails:
        parts += ["### Failures", "\n".join(f"- {f}" for f in fails)]
    path = out / "RESULTS.md"
    path.write_text(merged_report(path, "\n\n".join(parts)))
    return path


def merged_report(path: pathlib.Path, section: str) -> str:
    """RESULTS.md with this CPU's suite ``section`` first (replacing its earlier one), then the suite sections of
    other CPUs, then the other benchmarks' sections, each kept as it was."""
    others = _other_sections(path, {section.split("\n", 1)[0]})
    suites = [s for s in others if s.startswith("## Suite on ")]
    rest = [s for s in others if not s.startswith("## Suite on ")]
    return "\n\n".join(["# edgetorch benchmark results", section, *suites, *rest]) + "\n"


# The suite's own sections from before it kept one section per CPU; dropped when it rewrites the file.
_OLD_SUITE_SECTIONS = {
    "## Contenders",
    "## Time ratios",
    "## Latency (ms)",
    "## Max |error| against PyTorch eager",
    "## Export time and file size",
    "## Import time and peak memory",
    "## Compiler",
    "## Failures",
}


def _other_sections(path: pathlib.Path, ours: set[str]) -> list[str]:
    """The ``## `` sections of an existing RESULTS.md that other benchmarks (LLM, quantization) and runs on
    other CPUs wrote, kept as they are; the suite rewrites only its own CPU's section."""
    if not path.exists():
        return []
    sections = re.split(r"\n(?=## )", path.read_text())[1:]
    drop = ours | _OLD_SUITE_SECTIONS
    return [s.strip() for s in sections if s.split("\n", 1)[0].strip() not in drop]


def _meta(args: argparse.Namespace) -> dict:
    import executorch
    import onnxruntime

    from edgetorch.runtime.host import host

    return {
        "command": " ".join(["bench/suite.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": host().model,
        "cpu_class": cpu_class(host()),
        "host": host().describe(),
        "threads": args.threads,
        "quick": args.quick,
        "torch": torch.__version__,
        "executorch": getattr(executorch, "__version__", "1.5.1"),
        "onnxruntime": onnxruntime.__version__,
        "load_average_end": round(os.getloadavg()[0], 2),
    }


def cpu_class(cpu: Any) -> str:
    """What tells two CPUs of one model name apart for the kernels (an "AMD EPYC" may be a Zen 3 with AVX2 or a
    Zen 4 with AVX-512 VNNI): the vector width and the int8 dot product."""
    return f"{cpu.vector_bits}-bit vectors, int8 dot product: {cpu.int8_dot or 'none'}"


def warm_up_compilers(contenders: tuple[str, ...]) -> None:
    """Compile a tiny model once with each compiler so export times exclude one-time imports and registrations."""
    model, inputs = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).eval(), (torch.randn(2, 4),)
    for c in set(contenders) & set(COMPILE):
        COMPILE[c](torch.export.export(model, inputs))


def run_suite(models: list[str], contenders: tuple[str, ...], budget: Budget, workdir: pathlib.Path) -> dict:
    """Benchmark ``models`` with ``contenders``; the artifacts stay in ``workdir``."""
    warm_up_compilers(contenders)
    return {"contenders": list(contenders), "models": {m: bench_model(m, contenders, budget, workdir) for m in models}}


def _footprint(results: dict, repeats: int) -> dict:
    """Import time and peak memory on MobileNetV2's files (or the first model's, when it was not benchmarked)."""
    name = "mobilenet_v2" if "mobilenet_v2" in results["models"] else next(iter(results["models"]))
    res = results["models"][name]
    print(f"[suite] footprint on {name}", flush=True)
    return {"model": name, "rows": footprint.measure(res["artifacts"], res["inputs"], repeats)}


def _spin_at_start() -> str:
    """GOMP_SPINCOUNT as this process started (edgetorch's import may set it later, after torch loaded libgomp)."""
    try:
        start = pathlib.Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return "unknown"
    found = [e.split(b"=", 1)[1].decode() for e in start if e.startswith(b"GOMP_SPINCOUNT=")]
    return found[0] if found else "unset"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE_MODELS), help=f"comma-separated, from {sorted(MODELS)}")
    parser.add_argument("--quick", action="store_true", help="one timed run per contender, to check the scripts")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--footprint-repeats", type=int, help="fresh processes per footprint probe, 0 skips (default 5, 1 with --quick)"
    )
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench", help="where RESULTS.md and results/ go")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    set_threads(args.threads)
    models = args.models.split(",")
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        parser.error(f"unknown models {unknown}; choose from {sorted(MODELS)}")
    load_start = round(os.getloadavg()[0], 2)
    with tempfile.TemporaryDirectory(prefix="edgetorch-bench-") as tmp:
        results = run_suite(models, CONTENDERS, QUICK if args.quick else FULL, pathlib.Path(tmp))
        repeats = args.footprint_repeats if args.footprint_repeats is not None else 1 if args.quick else 5
        if repeats:
            results["footprint"] = _footprint(results, repeats)
    results["meta"] = {
        **_meta(args),
        "load_average_start": load_start,
        "gomp_spincount": _spin_at_start(),
        "numba_layer": _numba_layer(),
    }
    path = write_report(results, args.out)
    print("\n" + ratio_table(results) + "\n\n" + latency_table(results))
    print(f"\nwrote {path}")


def _numba_layer() -> str:
    """The threading layer numba ran this process's parallel loops on, or why there is none."""
    if "numba" not in sys.modules:
        return "none (numba not loaded)"
    try:
        return str(sys.modules["numba"].threading_layer())
    except ValueError:
        return "none (no parallel loop ran)"


if __name__ == "__main__":
    main()
