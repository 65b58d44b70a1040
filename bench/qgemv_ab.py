"""The integer GEMV of dynamically quantized linears (edgetorch/backends/xnnpack/qgemv.py) on an LLM: decode and
prefill of one 8da4w (or int8) XNNPACK ``.pte`` loaded twice in one process, once with the GEMV off (its
linears dequantized to float32 at load: the runtime before it) and once on, next to the fp32 ``.pte``, taking
turns so background load hits all alike; then the peak RSS of each, one fresh process per program.

Decode steps are timed in this thread's CPU time (BLAS pinned to ``--threads``, 1 by default; the GEMV is
single-threaded), the median of each round's best step. Example::

    python bench/qgemv_ab.py --gguf SmolLM2.gguf --fp32 fp32.pte q.pte --rounds 6
    python bench/qgemv_ab.py --gemv     # the kernel table: integer GEMV vs sgemm per shape and M
    python bench/qgemv_ab.py --kernel-ab main --rounds 20 [--cold] [--qc8w]  # QB4W (QC8W) GEMV, main vs here
    python bench/qgemv_ab.py --split main --threads 2 --rounds 15 [--cold]  # the GEMVs at 1 and 2 threads
    python bench/qgemv_ab.py --mlp --rounds 20     # bench/models.py's MLP, quantized / fp32
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import module_at, reexec_with_clean_blas_env, set_threads  # noqa: E402
from bench.llm import prompt_ids  # noqa: E402


def _runner(pte: str, gguf: str, gemv: bool):
    from edgetorch.extension.llm.runner import TextLLMRunner
    from edgetorch.runtime import policy

    rows = policy.current().gemv_max_rows
    # read at load: without the GEMV this runner's linears keep float32 weights, as before it
    with policy.using(gemv_max_rows=rows if gemv else dict.fromkeys(rows, 0)):
        runner = TextLLMRunner(pte, gguf)
        runner.load()
    return runner


def _peak_rss(pte: str, gguf: str, gemv: bool, threads: int, steps: int) -> float:
    """Peak RSS (MB) of a fresh process that loads ``pte``, prefills the prompt and decodes ``steps`` tokens."""
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent.parent)!r})
from bench.harness import set_threads
from bench.llm import prompt_ids
set_threads({threads}, with_torch=False)
from bench.qgemv_ab import _runner
r = _runner({pte!r}, {gguf!r}, {gemv!r})
token = int(r._forward(prompt_ids(r.tokenizer)).argmax())
for _ in range({steps}):
    token = int(r._forward([token]).argmax())
# VmHWM, not getrusage: Linux carries ru_maxrss over fork and exec, so a child of a big parent reports the parent's.
hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")][0]
print(json.dumps(int(hwm.split()[1]) / 1024))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    return json.loads(out.stdout.strip().splitlines()[-1])


# (K, N): SmolLM2-135M's (q/o, k/v, gate/up, down, 960-wide layers, the output head) and the MLP's
GEMV_SHAPES = [(576, 576), (576, 192), (576, 1536), (1536, 576), (576, 960), (576, 3072), (576, 49152)]
GEMV_SHAPES += [(1024, 1024), (784, 1024)]


def gemv_table(rounds: int, kinds: tuple[str, ...]) -> None:
    """Per shape and input rows M: the integer kernel (of a large program; QC8W's also of a small one, which
    makes no prefetches) vs dequantize + sgemm (the path above the row limit) vs sgemm on float32 weights held
    from load (the path before), thread CPU time, best of ``rounds`` x 20; ``kinds``: QC8W and / or QB4W/32."""
    import numpy as np

    from edgetorch.backends.xnnpack import qgemv

    rng = np.random.default_rng(0)

    def best(fn) -> float:
        times = []
        for _ in range(rounds):
            start = time.thread_time()
            for _ in range(20):
                fn()
            times.append((time.thread_time() - start) / 20)
        return min(times) * 1e3

    print(f"load average {os.getloadavg()[0]:.1f}; ms per call, best of {rounds} x 20, 1 thread")
    print("| weights | K x N | M | integer GEMV | GEMV, small program | dequantize + sgemm | sgemm, float32 held |")
    print("|---|---|---|---|---|---|---|")
    for k, n in GEMV_SHAPES:
        w8 = rng.integers(-127, 128, (n, k)).astype(np.int8)
        w4 = rng.integers(-8, 8, (n, k)).astype(np.uint8) + 8
        wscale = rng.uniform(0.01, 0.02, n).astype(np.float32)
        small = qgemv.IntegerLinear.qc8w(w8, wscale, None, keep=True)
        layers = {
            "QC8W": qgemv.IntegerLinear.qc8w(w8, wscale, None),
            "QB4W/32": qgemv.IntegerLinear.qb4w(
                w4[:, 0::2] | (w4[:, 1::2] << 4),
                rng.uniform(0.01, 0.02, (n, k // 32)).astype(np.float32),
                32,
                n,
                k,
                None,
            ),
        }
        for kind, layer in layers.items():
            if kind not in kinds:
                continue
            assert layer is not None, "the integer GEMV needs the [fast] tier (numba)"
            held = np.ascontiguousarray(layer.dequantized().T)
            for m in (1, 2, 4, 8, 16, 32):
                xc = rng.integers(-255, 256, (m, k)).astype(np.float32)
                xscale = np.full((m, 1), 0.01, np.float32)
                xa = np.ones((m, k + 1), np.float32)
                y = np.empty((m, n), np.float32)
                (step,) = layer.steps(xc, xscale, y, -np.inf, np.inf)
                dequantizing = partial(layer.matmul, xa, y)
                cells = [f"{best(step):.3f}", "-"]
                if kind == "QC8W":
                    assert small is not None
                    (step,) = small.steps(xc, xscale, y, -np.inf, np.inf)
                    cells[1] = f"{best(step):.3f}"
                cells += [f"{best(dequantizing):.3f}", f"{best(partial(np.matmul, xa, held, out=y)):.3f}"]
                print(f"| {kind} | {k} x {n} | {m} | " + " | ".join(cells) + " |", flush=True)


# QC8W shapes for --kernel-ab --qc8w, (N, K, input rows): SmolLM2-135M's output head (int8 per channel in its
# 8da4w export), gate/up and down at decode, and the MLP's layers (bench/models.py) at 1, 4 and 8 rows.
QC8W_SHAPES: list[tuple[int, int, tuple[int, ...]]] = [(49152, 576, (1,)), (1536, 576, (1,)), (576, 1536, (1,))]
QC8W_SHAPES += [(n, k, (1, 4, 8)) for n, k in ((1024, 784), (1024, 1024), (512, 1024))]


def _module_at(rev: str):
    """edgetorch/backends/xnnpack/qgemv.py as of git revision ``rev``, its kernels compiled under other names
    (fast.compiled keeps them by name, so the current ones would otherwise be handed back)."""
    return module_at(rev, "edgetorch/backends/xnnpack/qgemv.py", {'fast.compiled("': 'fast.compiled("ab_'})


def _turns(runs: dict[str, list], rounds: int, reps: int) -> dict[str, float]:
    """Best us per call of each contender's steps, over ``rounds`` turns taken in order (thread CPU time)."""
    best = dict.fromkeys(runs, math.inf)
    for _ in range(rounds):
        for name, steps in runs.items():
            start = time.thread_time()
            for _ in range(reps):
                for step in steps:
                    step()
            best[name] = min(best[name], (time.thread_time() - start) / (reps * len(steps)) * 1e6)
    return best


def kernel_ab(rev: str, rounds: int, cold: bool, kind: str) -> None:
    """The GEMV of ``kind`` (qb4w: at M = 1, per shape and block size; qc8w: QC8W_SHAPES) of git revision
    ``rev`` against this tree's: both in this process, taking turns, thread CPU time (best of ``rounds`` turns);
    their outputs checked bit for bit. ``cold``: each turn calls as many layers of the shape as fill 64 MB, once
    each, so the weights come from memory as in an LLM's decode (this machine's L3 is 32 MB); else one layer,
    repeatedly, in cache."""
    import numpy as np

    from edgetorch.backends.xnnpack import qgemv

    old = _module_at(rev)
    rng = np.random.default_rng(0)
    where = "out of cache (64 MB of layers)" if cold else "in cache"
    if kind == "qc8w":
        cases: list[tuple[int, int, int, int | None]] = [(n, k, m, None) for n, k, ms in QC8W_SHAPES for m in ms]
        print(f"QC8W GEMV, {where}: {rev} vs this tree; us per call, best of {rounds} turns, 1 thread")
        print("| N x K | M | before | after | speed-up |")
    else:
        cases = [(n, k, 1, block) for k, n in GEMV_SHAPES for block in (32, 128)]
        print(f"QB4W GEMV, M = 1, {where}: {rev} vs this tree; us per call, best of {rounds} turns, 1 thread")
        print("| N x K | block | before | after | speed-up |")
    print("|---|---|---|---|---|")
    for n, k, m, block in cases:
        size = n * k if block is None else n * k // 2
        layers = max(1, (64 << 20) // size) if cold else 1
        reps = 1 if cold else max(2, 100_000 // (m * n * k // 128))
        runs: dict[str, list] = {"before": [], "after": []}
        for _ in range(layers):
            bias = rng.standard_normal(n).astype(np.float32)
            xc = rng.integers(-255, 256, (m, k)).astype(np.float32)
            xscale = rng.uniform(0.01, 0.02, (m, 1)).astype(np.float32)
            if block is None:
                w8 = rng.integers(-128, 128, (n, k)).astype(np.int8)
                wscale = rng.uniform(0.01, 0.02, n).astype(np.float32)
            else:
                w4 = rng.integers(0, 16, (n, k)).astype(np.uint8)
                scales = rng.uniform(0.01, 0.02, (n, k // block)).astype(np.float32)
            outs = {}
            for name, mod in (("before", old), ("after", qgemv)):
                if block is None:  # in cache as in a small program (keeps float32 weights: no prefetch)
                    layer = mod.IntegerLinear.qc8w(w8, wscale, bias, keep=not cold)
                else:
                    layer = mod.IntegerLinear.qb4w(w4[:, 0::2] | (w4[:, 1::2] << 4), scales, block, n, k, bias)
                outs[name] = np.empty((m, n), np.float32)
                (step,) = layer.steps(xc, xscale, outs[name], -np.inf, np.inf)
                step()
                runs[name].append(step)
            assert np.array_equal(outs["before"].view(np.int32), outs["after"].view(np.int32)), (n, k, m, block)
        best = _turns(runs, rounds, reps)
        ratio = best["before"] / best["after"]
        column = m if block is None else block
        print(f"| {n} x {k} | {column} | {best['before']:.1f} | {best['after']:.1f} | {ratio:.2f}x |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


# (kind, N, K, input rows) for --split: SmolLM2-135M 8da4w's linears (q/k/v, o, gate/up, down: QB4W, blocks of
# 32; the output head: QC8W) at decode and prefill-sized M, and small layers (where the split stops paying).
SPLIT_CASES = [("qb4w", n, k, m) for n, k in ((960, 576), (576, 576), (1536, 576), (576, 1536)) for m in (1, 4, 16)]
SPLIT_CASES += [("qb4w", 192, 576, m) for m in (1, 4)] + [("qb4w", 320, 576, 1), ("qb4w", 384, 576, 1)]
SPLIT_CASES += [("qc8w", 49152, 576, 1), ("qc8w", 49152, 576, 4), ("qc8w", 1536, 576, 1), ("qc8w", 576, 576, 1)]
SPLIT_CASES += [("qc8w", 384, 576, 1)]


def split_table(rev: str, rounds: int, cold: bool) -> None:
    """The GEMVs of SPLIT_CASES split across threads: git revision ``rev``'s kernel against this tree's with
    ``set_num_threads(1)`` and ``(2)``, every split taken (the policy's gemv_split_macs 0), taking turns in this process; median
    wall-clock us a call over ``rounds`` turns, outputs checked bit for bit. ``cold``: as in ``kernel_ab``."""
    import numpy as np

    from edgetorch.backends.xnnpack import qgemv
    from edgetorch.runtime import get_num_threads, policy, set_num_threads

    old = _module_at(rev)
    policy.install(dataclasses.replace(policy.current(), gemv_split_macs=0))
    set_num_threads(2)  # loaded as for 2 threads: QB4W weights in 2 tiles
    rng = np.random.default_rng(0)
    where = "out of cache (64 MB of layers)" if cold else "in cache"
    print(f"Integer GEMV, {where}: {rev} vs this tree at 1 and 2 threads; wall us a call, median of {rounds} turns")
    print("| kind | N x K | M | before | 1 thread | 2 threads | 2 threads vs before |")
    print("|---|---|---|---|---|---|---|")
    for kind, n, k, m in SPLIT_CASES:
        size = n * k // 2 if kind == "qb4w" else n * k
        layers = max(1, (64 << 20) // size) if cold else 1
        reps = 1 if cold else max(2, 200_000 // (m * n * k // 128))
        runs: dict[str, list] = {"before": [], "1": [], "2": []}
        for _ in range(layers):
            bias = rng.standard_normal(n).astype(np.float32)
            xc = rng.integers(-255, 256, (m, k)).astype(np.float32)
            xscale = rng.uniform(0.01, 0.02, (m, 1)).astype(np.float32)
            if kind == "qc8w":
                w8 = rng.integers(-128, 128, (n, k)).astype(np.int8)
                wscale = rng.uniform(0.01, 0.02, n).astype(np.float32)
            else:
                w4 = rng.integers(0, 16, (n, k)).astype(np.uint8)
                scales = rng.uniform(0.01, 0.02, (n, k // 32)).astype(np.float32)
            outs = {}
            for name, mod in (("before", old), ("1", qgemv), ("2", qgemv)):
                if kind == "qc8w":
                    layer = mod.IntegerLinear.qc8w(w8, wscale, bias, keep=not cold)
                else:
                    layer = mod.IntegerLinear.qb4w(w4[:, 0::2] | (w4[:, 1::2] << 4), scales, 32, n, k, bias)
                outs[name] = np.full((m, n), np.nan, np.float32)
                (step,) = layer.steps(xc, xscale, outs[name], -np.inf, np.inf)
                step()
                runs[name].append(step)
            for name in ("1", "2"):
                assert np.array_equal(outs["before"].view(np.int32), outs[name].view(np.int32)), (kind, n, k, m)
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(rounds):
            for name, steps in runs.items():
                set_num_threads(2 if name == "2" else 1)
                start = time.perf_counter()
                for _ in range(reps):
                    for step in steps:
                        step()
                times[name].append((time.perf_counter() - start) / (reps * len(steps)) * 1e6)
        t = {name: statistics.median(v) for name, v in times.items()}
        print(
            f"| {kind.upper()} | {n} x {k} | {m} | {t['before']:.1f} | {t['1']:.1f} | {t['2']:.1f} | "
            f"{t['before'] / t['2']:.2f}x |",
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.1f}, threads now {get_num_threads()}")


def mlp_table(rounds: int) -> None:
    """bench/models.py's MLP (8 rows; bench/quant.py's int8-dynamic and 8da4w, our lowering): the quantized
    program with the GEMV off and on, and the fp32 program, alternating in this process; per-thread CPU time."""
    import numpy as np
    import torch

    from bench.models import MODELS
    from bench.quant import lower, quantize
    from edgetorch.runtime import Runtime, policy

    model, batch = MODELS["mlp"]()

    def method(pte: bytes, gemv: bool, arrays: list):
        rows = policy.current().gemv_max_rows
        with policy.using(gemv_max_rows=rows if gemv else dict.fromkeys(rows, 0)):
            m = Runtime.get().load_program(pte).load_method("forward")
        return partial(m.execute, arrays)

    print(f"bench/models.py's MLP; ms per call, thread CPU time, min / median of {rounds} rounds (best of 5 each)")
    print("| scheme | rows | fp32 | quantized, GEMV off (before) | GEMV on (after) | before / fp32 | after / fp32 |")
    print("|---|---|---|---|---|---|---|")
    for rows, scheme in ((8, "int8-dynamic"), (8, "8da4w"), (1, "int8-dynamic"), (1, "8da4w")):
        args = (batch[0][:rows],)
        arrays = [a.numpy() for a in args]
        fp32 = method(lower(torch.export.export(model, args), "ours"), True, arrays)
        pte = lower(quantize(model, args, scheme), "ours")
        runs = {"fp32": fp32, "before": method(pte, False, arrays), "after": method(pte, True, arrays)}
        np.testing.assert_allclose(runs["after"]()[0], runs["before"]()[0], rtol=1e-4, atol=1e-4)
        times: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(rounds):
            for k, run in runs.items():
                best = math.inf
                for _ in range(5):
                    start = time.thread_time()
                    run()
                    best = min(best, time.thread_time() - start)
                times[k].append(best * 1e3)
        lo = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        cells = [f"{lo[k]:.3f} / {med[k]:.3f}" for k in runs] + [
            f"{lo[k] / lo['fp32']:.2f} / {med[k] / med['fp32']:.2f}" for k in ("before", "after")
        ]
        print(f"| {scheme} | {rows} | " + " | ".join(cells) + " |", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pte", nargs="?", help="the quantized program (8da4w or int8, XNNPACK)")
    parser.add_argument("--fp32", help="the same model's fp32 XNNPACK program")
    parser.add_argument("--gguf", help="the tokenizer (the GGUF the programs came from)")
    parser.add_argument("--gemv", action="store_true", help="print the kernel table (integer GEMV vs sgemm) only")
    parser.add_argument("--mlp", action="store_true", help="print the MLP table (quantized / fp32) only")
    parser.add_argument("--kernel-ab", metavar="REV", help="print the QB4W GEMV of git revision REV vs this tree's")
    parser.add_argument(
        "--qc8w", action="store_true", help="--kernel-ab on the QC8W GEMV (QC8W_SHAPES), --gemv QC8W only"
    )
    parser.add_argument("--split", metavar="REV", help="print the GEMVs of REV vs this tree's at 1 and 2 threads")
    parser.add_argument("--cold", action="store_true", help="--kernel-ab / --split with the weights out of cache")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-rss", action="store_true", help="skip the peak RSS processes")
    args = parser.parse_args()
    reexec_with_clean_blas_env()
    set_threads(args.threads, with_torch=False)
    if args.split:
        split_table(args.split, args.rounds, args.cold)
        return
    if args.kernel_ab:
        kernel_ab(args.kernel_ab, args.rounds, args.cold, "qc8w" if args.qc8w else "qb4w")
        return
    if args.gemv or args.mlp:
        if args.gemv:
            gemv_table(args.rounds, ("QC8W",) if args.qc8w else ("QC8W", "QB4W/32"))
        if args.mlp:
            mlp_table(args.rounds)
        return
    if not (args.pte and args.fp32 and args.gguf):
        parser.error("a quantized .pte, --fp32 and --gguf are needed (or --gemv)")
    contenders = {
        "fp32": _runner(args.fp32, args.gguf, True),
        "quantized, GEMV off (before)": _runner(args.pte, args.gguf, False),
        "quantized, GEMV on (after)": _runner(args.pte, args.gguf, True),
    }
    ids = prompt_ids(contenders["fp32"].tokenizer)
    prefill: dict[str, list[float]] = {name: [] for name in contenders}
    decode: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.rounds):
        for name, r in contenders.items():
            r.reset()
            start = time.thread_time()
            token = int(r._forward(ids).argmax())
            prefill[name].append(time.thread_time() - start)
            steps = []
            for _ in range(args.steps):
                start = time.thread_time()
                token = int(r._forward([token]).argmax())
                steps.append(time.thread_time() - start)
            decode[name].append(min(steps))
    load = os.getloadavg()
    print(
        f"{len(ids)}-token prompt, {args.rounds} rounds x {args.steps} decode steps, {args.threads} BLAS thread(s), "
        f"thread CPU time, load average {load[0]:.1f}"
    )
    fp32_step = statistics.median(decode["fp32"])
    print("| program | prefill ms (median) | decode step ms (median / best) | decode tok/s | vs fp32 decode |")
    print("|---|---|---|---|---|")
    for name in contenders:
        step = statistics.median(decode[name])
        print(
            f"| {name} | {statistics.median(prefill[name]) * 1e3:.0f} | {step * 1e3:.1f} / "
            f"{min(decode[name]) * 1e3:.1f} | {1 / step:.1f} | {fp32_step / step:.2f}x |"
        )
    if args.no_rss:
        return
    size = Path(args.pte).stat().st_size / 2**20
    print(f"\npeak RSS (fresh process: load, prefill, {args.steps} decode steps); quantized file {size:.1f} MB")
    print("| program | peak RSS MB | / quantized file |")
    print("|---|---|---|")
    for name, pte, gemv in (("fp32", args.fp32, True), ("quantized, GEMV off", args.pte, False)) + (
        ("quantized, GEMV on", args.pte, True),
    ):
        rss = _peak_rss(pte, args.gguf, gemv, args.threads, args.steps)
        print(f"| {name} | {rss:.0f} | {rss / size:.2f} |")


if __name__ == "__main__":
    main()
