"""Diagnose an exported LLM program: does a multi-token prefill give the logits that feeding the same tokens
one call at a time gives, on our runtime and on ExecuTorch's (run in a subprocess by tests/oracle.py)?

    PYTHONPATH=. python scripts/llm_prefill_agreement.py PROGRAM.pte [--tokens 10] [--llama-ops]

Prints the largest logit difference between prefill and token-by-token on each runtime, and between the two
runtimes. ``--sensitivity`` adds how far our own logits move when nothing but attention's float32 rounding
changes: on SmolLM2-135M 8da4w that is 2.3, more than ours vs ExecuTorch (1.55), since every float difference
can flip an int8 rounding of the per-token activation quantization (2026-11-26 closing note). A per-token program (fp32, or 8da4w's per-token activation quantization) should agree to float
rounding; ExecuTorch 1.5.1 does (3e-5 on SmolLM2-135M 8da4w XNNPACK), see the 2026-11-25 closing note.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("program")
    parser.add_argument("--tokens", type=int, default=10)
    parser.add_argument("--llama-ops", action="store_true", help="load ExecuTorch's llama custom ops (custom SDPA)")
    parser.add_argument(
        "--sensitivity",
        action="store_true",
        help="also: how far our own token-by-token logits move when only attention's float32 rounding changes "
        "(the compiled decode attention against NumPy's path; needs the [fast] tier)",
    )
    args = parser.parse_args()

    from edgetorch.runtime import Runtime
    from tests.oracle import run_executorch_calls

    data = Path(args.program).read_bytes()
    n = args.tokens
    tokens = (np.arange(n, dtype=np.int64) * 37 + 11).reshape(1, n)
    prefill = [[tokens, np.array([0])]]
    steps = [[tokens[:, i : i + 1], np.array([i])] for i in range(n)]

    def last_logits(outputs: list) -> np.ndarray:
        logits = np.asarray(outputs[-1][0])
        return logits.reshape(-1, logits.shape[-1])[-1]

    def ours(calls: list) -> np.ndarray:
        method = Runtime.get().load_program(data).load_method("forward")
        return last_logits([method.execute(call) for call in calls])

    a, b = ours(prefill), ours(steps)
    c = last_logits(run_executorch_calls(data, prefill, llama_ops=args.llama_ops))
    d = last_logits(run_executorch_calls(data, steps, llama_ops=args.llama_ops))
    print(f"logits' largest magnitude: {np.abs(c).max():.3g}")
    print(f"edgetorch:  prefill vs one token a call  {np.abs(a - b).max():.3g}")
    print(f"ExecuTorch: prefill vs one token a call  {np.abs(c - d).max():.3g}")
    print(f"edgetorch vs ExecuTorch: prefill {np.abs(a - c).max():.3g}, one token a call {np.abs(b - d).max():.3g}")
    if args.sensitivity:
        from edgetorch.runtime.kernels import compiled

        saved = compiled.kernel_if_loaded
        compiled.kernel_if_loaded = lambda name: None  # NumPy's attention for every call
        try:
            e = ours(steps)
        finally:
            compiled.kernel_if_loaded = saved
        print(f"edgetorch one token a call, attention's rounding only: {np.abs(b - e).max():.3g}")


if __name__ == "__main__":
    main()
