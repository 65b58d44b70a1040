"""The one-row int8-dot ("VNNI") QB4W GEMV (qgemv_vnni.VnniGemvQB4W, in the host's dot form: AVX512-VNNI, else
AVX2) against the integer GEMV it replaces in a decode step (qgemv.py's ``_qb4w``, numba) on SmolLM2-135M's 8da4w
linear shapes (block 32), one thread: ``hot`` repeats one
layer (its weights stay in cache), ``streamed`` takes a different copy of the layer each call, enough copies to
exceed the last-level cache (the weights come from memory, as in a decode step through the whole model). Each
cell is the least of ``--rounds`` rounds' mean time a call (CPU time of this thread); the outputs of the two
kernels are checked equal bit for bit first. Needs an x86 host with AVX512-VNNI or AVX2, llvmlite and numba.
Example::

    python bench/llm_vnni_gemv.py --rounds 7
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgetorch.backends.xnnpack import qgemv, qgemv_vnni  # noqa: E402
from edgetorch.runtime import policy  # noqa: E402
from edgetorch.runtime.kernels import compiled  # noqa: E402

SHAPES = {"q, o (576 x 576)": (576, 576), "k, v fused (960 x 576)": (960, 576)}
SHAPES |= {"gate, up (1536 x 576)": (1536, 576), "down (576 x 1536)": (576, 1536)}
BLOCK = 32
STREAMED_BYTES = 96 << 20  # of 4-bit weights a copy set, three times a 32 MiB L3


def _calls(n: int, k: int, copies: int, rng: np.random.Generator) -> dict[str, list]:
    """For ``copies`` random layers [n, k] on one row: each kernel's call per layer, after checking equal bits."""
    xc = (rng.integers(-128, 128, (1, k)) - int(rng.integers(-128, 128))).astype(np.float32)
    xscale = np.full((1, 1), 0.01, np.float32)
    calls: dict[str, list] = {"integer GEMV (numba)": [], "VNNI GEMV": []}
    for _ in range(copies):
        packed = rng.integers(0, 256, (n, k // 2), dtype=np.uint8)
        scales = rng.uniform(-0.02, 0.02, (n, k // BLOCK)).astype(np.float32)
        scales = (scales.view(np.uint32) & 0xFFFF0000).view(np.float32)  # bfloat16 values, as the programs store
        bias = rng.standard_normal(n).astype(np.float32)
        layer = qgemv.IntegerLinear.qb4w(packed, scales, BLOCK, n, k, bias)
        ys = np.full((2, 1, n), np.nan, np.float32)
        (numba,) = layer._gemv_steps(xc, xscale, ys[0], -np.inf, np.inf)
        vnni = layer.vnni_gemv_layer().step(xc, xscale, layer.bias, ys[1], -np.inf, np.inf)
        numba(), vnni()
        if not np.array_equal(ys[0].view(np.int32), ys[1].view(np.int32)):
            raise SystemExit(f"{n}x{k}: the VNNI GEMV's outputs differ from the integer GEMV's")
        calls["integer GEMV (numba)"].append(numba)
        calls["VNNI GEMV"].append(vnni)
    return calls


def _time(calls: list, repeat: int, rounds: int) -> float:
    """Least over rounds of the mean CPU seconds a call, taking ``calls`` in turn ``repeat`` times a round."""
    best = float("inf")
    for _ in range(rounds + 1):  # the first round is a warm-up
        start = time.thread_time()
        for _ in range(repeat):
            for call in calls:
                call()
        best = min(best, (time.thread_time() - start) / (repeat * len(calls)))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if not qgemv_vnni.available() or not policy.compiled_tier():
        raise SystemExit("needs an x86 host with avx512_vnni or avx2, llvmlite and numba")
    compiled.set_num_threads(1)
    rng = np.random.default_rng(0)
    print("| layer | weights | integer GEMV (numba) us | VNNI GEMV us | speed-up |")
    print("|---|---|---|---|---|")
    with policy.using(tune=False):
        for name, (n, k) in SHAPES.items():
            copies = -(-STREAMED_BYTES // (n * k // 2))
            runs = _calls(n, k, copies, rng)
            for where, count, repeat in (("hot", 1, 3000), ("streamed", copies, max(1, 3000 // copies))):
                old, new = (_time(runs[kind][:count], repeat, args.rounds) * 1e6 for kind in runs)
                print(f"| {name} | {where} | {old:.2f} | {new:.2f} | {old / new:.2f}x |")


if __name__ == "__main__":
    main()
