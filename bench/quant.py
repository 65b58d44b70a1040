"""Quantized models on edgetorch's XNNPACK runtime vs ExecuTorch's and ONNX Runtime: accuracy, size, latency.

For each benchmark model (bench/models.py) and scheme the model is quantized (PT2E with
ExecuTorch's XNNPACKQuantizer, whose converted graphs equal ours: ``int8`` static per-channel,
calibrated on the example input and three more of its distribution, for the CNNs (on the
photos of examples/vision for EfficientNet-Lite0, whose real weights also give a top-1 agreement
with the float model on them);
``int8-dynamic`` per-channel, and torchao's ``quantize_`` 8da4w (group 32; a linear whose
input size 32 does not divide stays float) for the MLP and transformers). "Ours" is that graph
lowered by edgetorch's compiler and XnnpackPartitioner (the CLI's path) and run on edgetorch's
runtime; ExecuTorch's contender is the same quantized graph lowered by ExecuTorch's partitioner
and run by its runtime. SQNR is each output against the float model's eager output. The fp32
program is our XNNPACK lowering of the float model, run on our runtime. ONNX Runtime
int8 is ``onnxruntime.quantization.quantize_dynamic`` (int8 weights) on ``torch.onnx.export``'s
model. Latency: median wall time, one process, ``--threads`` BLAS/intra-op threads for everyone.
A second table times the integer-GEMM options (see edgetorch/backends/xnnpack/qgemm.py).

    python bench/quant.py [--models mlp,mobilenet_v2,resnet18,vit_tiny,gpt2,efficientnet_lite0] [--quick] [--threads 1]
        [--results bench/RESULTS.md]
    python bench/quant.py --versus-fp32 [--models ...] [--rounds 40]

``--versus-fp32`` prints only quantized time / fp32 time on our runtime, the programs taking turns in one
process (this thread's CPU time, the median of ``--rounds``), which a loaded machine does not skew.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import logging
import math
import pathlib
import sys
import tempfile
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.harness import KEEP_BELOW, fmt_bytes, fmt_ms, median_time, replace_section, set_threads, table  # noqa: E402

SCHEMES = {
    "mlp": ("int8-dynamic", "8da4w"),
    "mobilenet_v2": ("int8",),
    "resnet18": ("int8",),
    "vit_tiny": ("int8-dynamic", "8da4w"),
    "gpt2": ("int8-dynamic", "8da4w"),
    "efficientnet_lite0": ("int8",),
}
SECTION = "## Quantization (bench/quant.py)"


def sqnr(reference: np.ndarray, test: np.ndarray) -> float:
    """Signal-to-quantization-noise ratio in dB."""
    reference, test = np.asarray(reference, np.float64), np.asarray(test, np.float64)
    noise = np.linalg.norm(reference - test)
    return math.inf if noise == 0 else float(20 * np.log10(np.linalg.norm(reference) / noise))


def quantize(
    model: torch.nn.Module, args: tuple, scheme: str, calibration: list[tuple] | None = None
) -> torch.export.ExportedProgram:
    """The quantized ``torch.export`` program of ``model`` under ``scheme``; static schemes calibrate on
    ``calibration`` (argument tuples) when given, else on ``args`` and three random inputs like them."""
    model = copy.deepcopy(model)
    tied = _quantize_embeddings(model, scheme)
    if scheme == "8da4w":
        from torchao.quantization.granularity import PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
        # A linear whose input size 32 does not divide (the MLP's 784 pixels) stays float.
        quantize_(model, config, lambda m, fqn: isinstance(m, torch.nn.Linear) and m.in_features % 32 == 0)
        _tie(tied)
        return torch.export.export(model, args)
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as theirs
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    dynamic = scheme == "int8-dynamic"
    config = theirs.get_symmetric_quantization_config(is_per_channel=True, is_dynamic=dynamic)
    _tie(tied, config)
    prepared = prepare_pt2e(torch.export.export(model, args).module(), theirs.XNNPACKQuantizer().set_global(config))
    torch.manual_seed(2)
    if calibration is None:
        calibration = [args]
        if not dynamic:
            calibration += [tuple(torch.randn_like(a) if a.is_floating_point() else a for a in args) for _ in range(3)]
    with torch.no_grad():
        for batch in calibration:
            prepared(*batch)
    return torch.export.export(convert_pt2e(prepared), args)


def _quantize_embeddings(model: torch.nn.Module, scheme: str) -> list:
    """Embedding tables in 8 bits per row (int8-dynamic) or 4 bits in groups of 32 (8da4w), as the LLM
    export's ``embedding_quantize`` ("8,0" / "4,32") does: ``quantized_decomposed::embedding_byte`` /
    ``embedding_4bit`` (edgetorch.extension.llm.embedding_quant), ops both runtimes run outside the
    delegate. A table tied to a linear (GPT-2's token embedding and LM head) is untied here and returned
    as (parent, name, linear) for :func:`_tie`, which quantizes it as that linear's weight."""
    if scheme not in ("int8-dynamic", "8da4w"):
        return []
    from edgetorch.extension.llm.embedding_quant import QuantizedEmbedding

    bits, group = (8, 0) if scheme == "int8-dynamic" else (4, 32)
    linears = {id(m.weight): m for m in model.modules() if isinstance(m, torch.nn.Linear)}
    tied = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Embedding) and id(child.weight) in linears:
                tied.append((parent, name, linears[id(child.weight)]))
            elif isinstance(child, torch.nn.Embedding) and child.embedding_dim % (group or 1) == 0:
                setattr(parent, name, QuantizedEmbedding(child.weight, bits, group))
    for _, _, linear in tied:  # the linear's own copy, which the linear quantization takes
        linear.weight = torch.nn.Parameter(linear.weight.detach().clone())
    return tied


def _tie(tied: list, config: object | None = None) -> None:
    """Tied tables quantized as their linear's weight is (8da4w: already; PT2E: by ``config``), so that the
    program stores them once (edgetorch's ``share_identical_data``; ExecuTorch's writer stores them twice)."""
    from edgetorch.extension.llm.embedding_quant import tied_embedding

    for parent, name, linear in tied:
        setattr(parent, name, tied_embedding(linear, config))


def lower(ep: torch.export.ExportedProgram, which: str) -> bytes:
    """The .pte of ``ep`` lowered to XNNPACK by ``which``: "ours" (edgetorch's compiler and
    XnnpackPartitioner, the CLI's path) or "et" (ExecuTorch's). Each lowers its own copy of ``ep``."""
    ep = copy.deepcopy(ep)
    if which == "ours":
        from edgetorch.backends.xnnpack import XnnpackPartitioner
        from edgetorch.exir import to_edge_transform_and_lower
    else:
        import executorch.kernels.quantized  # noqa: F401  (the embedding ops' out variants)
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def runners(ours_pte: bytes, et_pte: bytes, args: tuple) -> dict:
    """Our lowering on our runtime, ExecuTorch's lowering on ExecuTorch's runtime: each on ``args`` (``ours``,
    ``et``) and on inputs given (``ours_on``, ``et_on``)."""
    from executorch.runtime import Runtime as EtRuntime

    from edgetorch.runtime import Runtime

    ours = Runtime.get().load_program(ours_pte).load_method("forward")
    et_program = EtRuntime.get().load_program(et_pte)
    theirs = et_program.load_method("forward")
    arrays = [a.numpy() for a in args]
    return {
        "ours": lambda: ours.execute(arrays)[0],
        "et": lambda: np.asarray(theirs.execute(list(args))[0]),
        "ours_on": lambda other: ours.execute([a.numpy() for a in other])[0],
        "et_on": lambda other: np.asarray(theirs.execute(list(other))[0]),
        "_keep": et_program,
    }


def ort_int8(model: torch.nn.Module, args: tuple, work: pathlib.Path) -> tuple:
    """(runner, file bytes) of ONNX Runtime on the dynamically int8-quantized ONNX export of ``model``."""
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32, int8 = work / "model.onnx", work / "model.int8.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model, args, str(fp32), dynamo=True)
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = torch.get_num_threads(), 1
    session = ort.InferenceSession(str(int8), options, providers=["CPUExecutionProvider"])
    feed = {i.name: a.numpy() for i, a in zip(session.get_inputs(), args)}
    return (lambda: session.run(None, feed)[0]), sum(p.stat().st_size for p in work.glob("model.int8.onnx*"))


def model_results(name: str, quick: bool) -> dict:
    from bench.models import MODELS, REAL_INPUTS

    budget = dict(min_runs=1 if quick else 5, budget_s=2.0 if quick else 10.0)
    model, args = MODELS[name]()
    real = REAL_INPUTS[name]() if name in REAL_INPUTS else None
    with torch.no_grad():
        reference = model(*args).detach().numpy()
    fp32_ep = torch.export.export(model, args)
    fp32 = lower(fp32_ep, "ours")
    fp32_run = runners(fp32, lower(fp32_ep, "et"), args)
    out = {"fp32_bytes": len(fp32), "fp32_ours_ms": 1e3 * median_time(fp32_run["ours"], **budget)}
    out["fp32_et_ms"] = 1e3 * median_time(fp32_run["et"], **budget)
    del fp32_run
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ort_run, ort_bytes = ort_int8(model, args, pathlib.Path(tmp))
            out["ort"] = {"bytes": ort_bytes, "ms": 1e3 * median_time(ort_run, **budget)}
            out["ort"]["sqnr"] = sqnr(reference, ort_run())
            del ort_run
        except Exception as e:  # noqa: BLE001 - a failed contender is a table cell, not the end of the run
            out["ort"] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"}
    out["schemes"] = {}
    for scheme in SCHEMES[name]:
        try:
            out["schemes"][scheme] = scheme_results(model, args, scheme, reference, budget, real)
        except Exception as e:  # noqa: BLE001
            out["schemes"][scheme] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"}
        print(f"[quant] {name} {scheme}: {out['schemes'][scheme]}", flush=True)
    return out


def scheme_results(
    model: torch.nn.Module, args: tuple, scheme: str, reference: np.ndarray, budget: dict, real: list[tuple] | None
) -> dict:
    """Size, SQNR and latency of ``scheme`` on both compilers and runtimes; with ``real`` inputs (calibration
    data too), on how many of them each quantized program's top-1 class is the float model's."""
    ep = quantize(model, args, scheme, real)
    t0 = time.perf_counter()
    pte = lower(ep, "ours")
    row = {"bytes": len(pte), "compile_s": time.perf_counter() - t0}
    et_pte = lower(ep, "et")
    row["et_bytes"] = len(et_pte)
    run = runners(pte, et_pte, args)
    row["sqnr_ours"], row["sqnr_et"] = sqnr(reference, run["ours"]()), sqnr(reference, run["et"]())
    row["ours_ms"], row["et_ms"] = (1e3 * median_time(run[k], **budget) for k in ("ours", "et"))
    if real is not None:
        with torch.no_grad():
            want = [int(model(*a).argmax()) for a in real]
        for who in ("ours", "et"):
            row[f"top1_{who}"] = sum(int(np.argmax(run[f"{who}_on"](a))) == w for a, w in zip(real, want))
        row["top1_of"] = len(real)
    return row


def model_rows(results: dict) -> list[list[str]]:
    rows = []
    for name, r in results.items():
        ort = r["ort"]
        for scheme, s in r["schemes"].items():
            if "error" in s:
                rows.append([name, scheme, s["error"]] + [""] * (len(MODEL_HEADERS) - 3))
                continue
            rows.append(
                [
                    name,
                    scheme,
                    fmt_bytes(s["bytes"]),
                    f"{s['bytes'] / r['fp32_bytes']:.2f}",
                    f"{s['sqnr_ours']:.1f}",
                    f"{s['sqnr_et']:.1f}",
                    f"{ort['sqnr']:.1f}" if "sqnr" in ort else "n/a",
                    f"{s['top1_ours']}/{s['top1_of']} ours, {s['top1_et']}/{s['top1_of']} ET" if "top1_of" in s else "",
                    fmt_ms(s["ours_ms"] / 1e3),
                    fmt_ms(r["fp32_ours_ms"] / 1e3),
                    f"{s['ours_ms'] / r['fp32_ours_ms']:.2f}",
                    fmt_ms(s["et_ms"] / 1e3),
                    fmt_ms(ort["ms"] / 1e3) if "ms" in ort else ort.get("error", "n/a"),
                ]
            )
    return rows


MODEL_HEADERS = [
    "model",
    "scheme",
    "file",
    "size/fp32",
    "SQNR ours dB",
    "SQNR ET dB",
    "SQNR ORT int8 dB",
    "top-1 = fp32",
    "ours ms",
    "ours fp32 ms",
    "ours/ours fp32",
    "ET XNNPACK ms",
    "ORT int8 ms",
]


def _gemm_options(xq: np.ndarray, wq: np.ndarray) -> dict:
    """The ways to compute int8 [M, K] x int8 [K, N] -> int32 with NumPy, as no-argument functions."""
    from edgetorch.backends.xnnpack import qgemm

    x32, w32 = xq.astype(np.float32), wq.astype(np.float32)
    xi, wi = xq.astype(np.int32), wq.astype(np.int32)
    x64, w64 = xq.astype(np.float64), wq.astype(np.float64)
    w_deq = w32 * np.float32(0.01)  # dequantize-then-sgemm: the weight scaled once, cached
    splits = qgemm.exact_splits(w32, 128.0)
    out = np.empty((xq.shape[0], wq.shape[1]), np.float32)
    chunked = qgemm.matmul_steps(x32, w32, out, splits)

    def exact_f32():
        for step in chunked:
            step()
        return out

    return {
        f"f32 sgemm, exact by L1 bound ({len(splits) - 1} chunk{'s' * (len(splits) > 2)})": exact_f32,
        "int32 matmul": lambda: xi @ wi,
        "f64 dgemm": lambda: x64 @ w64,
        "dequantized f32 sgemm (inexact)": lambda: x32 @ w_deq,
    }


def gemm_rows(quick: bool) -> list[list[str]]:
    """The quantized fully connected's GEMM, [M, K] int8 x [K, N] int8 -> int32, four ways."""
    budget = dict(min_runs=1 if quick else 5, budget_s=1.0 if quick else 5.0)
    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in ((1, 768, 3072), (32, 1024, 1024), (128, 768, 3072), (3136, 576, 64)):
        xq = rng.integers(-128, 128, (m, k), dtype=np.int8)
        # weights like a quantized layer's: roughly normal, the largest magnitude 127
        wq = np.clip(np.rint(rng.standard_normal((k, n)) * 127 / 4), -127, 127).astype(np.int8)
        want = xq.astype(np.int64) @ wq.astype(np.int64)
        for label, f in _gemm_options(xq, wq).items():
            exact = bool(np.array_equal(np.asarray(f()).astype(np.int64), want))
            rows.append([f"{m}x{k}x{n}", label, fmt_ms(median_time(f, **budget)), "yes" if exact else "no"])
    return rows


def plot(results: dict, path: pathlib.Path) -> None:
    """Grouped bars per model and scheme: ours quantized, ours fp32, ExecuTorch quantized, ORT int8 (log ms)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [(n, s) for n, r in results.items() for s, row in r["schemes"].items() if "error" not in row]
    bars = {
        "edgetorch quantized": lambda r, s: r["schemes"][s]["ours_ms"],
        "edgetorch fp32": lambda r, s: r["fp32_ours_ms"],
        "ExecuTorch XNNPACK quantized": lambda r, s: r["schemes"][s]["et_ms"],
        "ONNX Runtime int8": lambda r, s: r["ort"].get("ms", math.nan),
    }
    fig, ax = plt.subplots(figsize=(max(7.0, 1.4 * len(cases) + 2), 4.8), layout="constrained")
    width = 0.8 / len(bars)
    for i, (label, get) in enumerate(bars.items()):
        xs = [c + (i - (len(bars) - 1) / 2) * width for c in range(len(cases))]
        ax.bar(xs, [get(results[n], s) for n, s in cases], width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(len(cases)), [f"{n}\n{s}" for n, s in cases], fontsize=8)
    ax.set_ylabel("median latency, ms (log scale)")
    ax.set_title("Quantized latency per model (lower is better)")
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SCHEMES))
    parser.add_argument("--quick", action="store_true", help="one timed run per contender")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--results", help="write the tables and plot into this RESULTS.md (and results/quant.*)")
    parser.add_argument("--versus-fp32", action="store_true", help="only our quantized / fp32 time, interleaved")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    set_threads(args.threads)
    if args.versus_fp32:
        for name in args.models.split(","):
            print(f"[quant] {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in versus_fp32(name, args.rounds).items()))
        return
    gemms = table(["M x K x N", "GEMM", "ms", "exact int32 result"], gemm_rows(args.quick))
    print(gemms, flush=True)
    results: dict = {}
    for name in args.models.split(","):
        try:
            results[name] = model_results(name, args.quick)
        except Exception as e:  # noqa: BLE001 - report the models that ran
            print(f"[quant] {name} failed: {type(e).__name__}: {e}", flush=True)
            continue
        if args.results:  # after every model, so a long run leaves what it measured
            report(pathlib.Path(args.results), results, gemms, args.threads)
    print(table(MODEL_HEADERS, model_rows(results)))


def versus_fp32(name: str, rounds: int) -> dict[str, float]:
    """Each scheme's time over the fp32 program's on our runtime, the programs run in turns in this process
    (thread CPU time, median of ``rounds``)."""
    from functools import partial

    from bench.models import MODELS
    from bench.profile_xnnpack import interleaved
    from edgetorch.runtime import Runtime

    model, args = MODELS[name]()
    programs = {"fp32": lower(torch.export.export(model, args), "ours")}
    programs.update((scheme, lower(quantize(model, args, scheme), "ours")) for scheme in SCHEMES[name])
    inputs = [a.numpy() for a in args]
    methods = {k: Runtime.get().load_program(pte).load_method("forward") for k, pte in programs.items()}
    runs = {k: partial(m.execute, inputs) for k, m in methods.items()}
    times = interleaved(runs, rounds, budget_s=120.0, clock=time.thread_time)
    return {k: t / times["fp32"] for k, t in times.items() if k != "fp32"}


def report(results_md: pathlib.Path, results: dict, gemms: str, threads: int) -> None:
    out_dir = results_md.parent / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "quant.json").write_text(json.dumps({"threads": threads, "models": results}, indent=1))
    plot(results, out_dir / "quant.png")
    body = (
        f"{SECTION}\n\n`python bench/quant.py --threads {threads} --results bench/RESULTS.md`; "
        "ExecuTorch's XNNPACKQuantizer (int8: static per-channel; int8-dynamic: dynamic per-channel) or "
        "torchao 8da4w (group 32); embeddings (GPT-2's) in 8 bits per row / 4 bits in groups of 32 "
        "(`quantized_decomposed::embedding_byte` / `embedding_4bit`, the LLM export's ops; the token table tied to "
        "the LM head quantized as its weight, which our writer then stores once). Ours: lowered by edgetorch's XnnpackPartitioner (the CLI's path), run on "
        "edgetorch; ET: the same quantized graph lowered by ExecuTorch's partitioner, run on ExecuTorch. SQNR against the float model's eager output. ORT int8: `quantize_dynamic` on "
        "`torch.onnx.export`'s model. EfficientNet-Lite0 (real ImageNet weights) is calibrated on examples/vision's photos; "
        "top-1 = fp32 counts the photos whose quantized top-1 class is the float model's. Medians on the shared 2-core "
        "machine (noisy).\n\n"
        f"{table(MODEL_HEADERS, model_rows(results))}\n\n![quantized latency](results/quant.png)\n\n"
        "The integer GEMM options (int8 [M, K] x int8 [K, N] -> int32; see "
        "`edgetorch/backends/xnnpack/qgemm.py`):\n\n"
        f"{gemms}\n\n{KEEP_BELOW}\n"
    )
    replace_section(results_md, SECTION, body)
    print(f"[quant] wrote {results_md} and {out_dir / 'quant.png'}", flush=True)


if __name__ == "__main__":
    main()
