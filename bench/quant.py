"""Quantized models on edgetorch's XNNPACK runtime vs ExecuTorch's: accuracy, file size, latency; and the GEMM choice.

For each model and scheme the model is quantized (PT2E with ExecuTorch's XNNPACKQuantizer,
whose converted graphs equal ours, or torchao's ``quantize_`` for 8da4w) and lowered by
ExecuTorch's XNNPACK partitioner; the same .pte runs on both runtimes (one process, 2 threads,
median latency). SQNR is of each runtime's output against the float model's. The float
program is ExecuTorch's XNNPACK fp32 lowering of the same model. A second table times the
integer-GEMM options for the quantized fully connected (see edgetorch/backends/xnnpack/runtime.py).

    .venv/bin/python bench/quant.py [--models mlp_large,cnn_large] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.harness import fmt_ms, median_time, set_threads, table  # noqa: E402

SCHEMES = {"mlp_large": ("static", "dynamic", "8da4w"), "cnn_large": ("static", "dynamic")}


def _lower(ep: torch.export.ExportedProgram) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def _runners(pte: bytes, args: tuple) -> dict:
    from executorch.runtime import Runtime as EtRuntime

    from edgetorch.runtime import Runtime

    ours = Runtime.get().load_program(pte).load_method("forward")
    theirs = EtRuntime.get().load_program(pte).load_method("forward")
    arrays = [a.numpy() for a in args]
    return {"ours": lambda: ours.execute(arrays)[0], "et": lambda: theirs.execute(list(args))[0]}


def model_rows(name: str, quick: bool) -> list[list[str]]:
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as theirs

    from tests.interop.quantized_models import float_model, quantized, sqnr

    budget = dict(min_runs=1 if quick else 5, budget_s=2.0 if quick else 10.0)
    model, args = float_model(name)
    reference = model(*args).detach().numpy()
    fp32 = _lower(torch.export.export(model, args))
    fp32_run = _runners(fp32, args)
    fp32_ours, fp32_et = (median_time(fp32_run[k], **budget) for k in ("ours", "et"))
    rows = [[name, "fp32", f"{len(fp32)}", "1.00", "", "", fmt_ms(fp32_ours), fmt_ms(fp32_et), "1.00"]]
    for scheme in SCHEMES[name]:
        pt2e = {"quantizer_cls": theirs.XNNPACKQuantizer, "config_fn": theirs.get_symmetric_quantization_config}
        _, _, ep = quantized(name, scheme, **(pt2e if scheme in ("static", "dynamic") else {}))
        pte = _lower(ep)
        run = _runners(pte, args)
        ours_out, et_out = np.asarray(run["ours"]()), np.asarray(run["et"]())
        t_ours, t_et = (median_time(run[k], **budget) for k in ("ours", "et"))
        rows.append(
            [
                name,
                scheme,
                f"{len(pte)}",
                f"{len(pte) / len(fp32):.2f}",
                f"{sqnr(reference, ours_out):.1f}",
                f"{sqnr(reference, et_out):.1f}",
                fmt_ms(t_ours),
                fmt_ms(t_et),
                f"{t_ours / fp32_ours:.2f}",
            ]
        )
    return rows


def _gemm_options(xq: np.ndarray, wq: np.ndarray) -> dict:
    """The ways to compute int8 [M, K] x int8 [K, N] -> int32 with NumPy, as no-argument functions."""
    k = xq.shape[1]
    x32, w32 = xq.astype(np.float32), wq.astype(np.float32)
    xi, wi = xq.astype(np.int32), wq.astype(np.int32)
    x64, w64 = xq.astype(np.float64), wq.astype(np.float64)
    w_deq = w32 * np.float32(0.01)  # dequantize-then-sgemm: the weight scaled once, cached

    def exact_f32():
        if k <= 512:
            return x32 @ w32
        return sum((x32[:, i : i + 512] @ w32[i : i + 512]).astype(np.float64) for i in range(0, k, 512))

    return {
        "f32 sgemm, K-chunks of 512 (exact)": exact_f32,
        "int32 matmul": lambda: xi @ wi,
        "f64 dgemm": lambda: x64 @ w64,
        "dequantized f32 sgemm (inexact)": lambda: x32 @ w_deq,
    }


def gemm_rows(quick: bool) -> list[list[str]]:
    """The quantized fully connected's GEMM, [M, K] int8 x [K, N] int8 -> int32, four ways."""
    budget = dict(min_runs=1 if quick else 5, budget_s=1.0 if quick else 5.0)
    rng = np.random.default_rng(0)
    rows = []
    for m, k, n in ((1, 512, 1024), (32, 512, 1024), (256, 1024, 1024), (1024, 288, 32)):
        xq = rng.integers(-128, 128, (m, k), dtype=np.int8)
        wq = rng.integers(-127, 128, (k, n), dtype=np.int8)
        want = xq.astype(np.int64) @ wq.astype(np.int64)
        for label, f in _gemm_options(xq, wq).items():
            exact = bool(np.array_equal(np.asarray(f()).astype(np.int64), want))
            rows.append([f"{m}x{k}x{n}", label, fmt_ms(median_time(f, **budget)), "yes" if exact else "no"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SCHEMES))
    parser.add_argument("--quick", action="store_true", help="one timed run per contender")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    set_threads(args.threads)
    rows = [r for name in args.models.split(",") for r in model_rows(name, args.quick)]
    headers = [
        "model",
        "scheme",
        "bytes",
        "size/fp32",
        "SQNR ours dB",
        "SQNR ET dB",
        "ours ms",
        "ET ms",
        "ours/ours fp32",
    ]
    print(table(headers, rows))
    print()
    print(table(["M x K x N", "GEMM", "ms", "exact int32 result"], gemm_rows(args.quick)))


if __name__ == "__main__":
    main()
