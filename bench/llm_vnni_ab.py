"""Prefill A/B in one process: the 8da4w program's linears past the GEMV's rows on sgemm (dequantized weights)
and on the VNNI GEMM (qgemv_vnni.py), both methods loaded under fixed tuning choices, then timed alternately
on the same prompt at position 0; prints tok/s (best and median of 6) and the largest logit difference
(sgemm rounds differently from the integer paths). A shared host slows both sides alike. Example::

    python bench/llm_vnni_ab.py 1 128 /tmp/smol8da4w_sdpa.pte   # threads, prompt tokens, program
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import set_threads  # noqa: E402


def main(threads: int, n: int, pte: str) -> None:
    set_threads(threads, with_torch=False)
    import numpy as np

    from edgetorch.runtime import Runtime, policy

    tokens = np.asarray([[(17 * i + 5) % 49152 for i in range(n)]], np.int64)
    pos = np.zeros(1, np.int64)
    methods, outs = {}, {}
    for name in ("sgemm", "vnni"):
        with policy.using(kernel_choices={"qb4w-vnni": name, "qgemv": name}):
            methods[name] = Runtime.get().load_program(pte).load_method("forward")
            outs[name] = np.array(methods[name].execute([tokens, pos])[0])  # plans the shape under the choice
    diff = float(np.abs(outs["sgemm"] - outs["vnni"]).max())
    times: dict[str, list[float]] = {k: [] for k in methods}
    for _ in range(6):
        for name, method in methods.items():
            start = time.perf_counter()
            method.execute([tokens, pos])
            times[name].append(time.perf_counter() - start)
    rates = " ".join(f"{k}: {n / min(v):.0f} tok/s (median {n / np.median(v):.0f})" for k, v in times.items())
    print(f"threads {threads} tokens {n} load {os.getloadavg()[0]:.2f} max|logit diff| {diff:.4f} {rates}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
