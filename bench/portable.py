"""edgetorch's runtime against ExecuTorch's C++ runtime with its portable kernels, on the same .pte files.

The .pte files are written by the real ExecuTorch 1.5.1 (`to_edge(...).to_executorch()`, no delegate),
run in one process, 2 threads. Prints a markdown table and writes bench/results/portable.md.

    .venv/bin/python bench/portable.py [--models mlp,mobilenet_v2,small_transformer,gpt2]
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,mobilenet_v2,small_transformer,gpt2")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    set_threads(args.threads)
    from executorch.exir import to_edge
    from executorch.runtime import Runtime as EtRuntime

    from edgetorch.runtime import Runtime

    rows = []
    for name in args.models.split(","):
        model, inputs = MODELS[name]()
        print(f"[bench] {name}: exporting with ExecuTorch", flush=True)
        pte = to_edge(torch.export.export(model, inputs)).to_executorch().buffer
        with torch.no_grad():
            want = model(*inputs).numpy()
        et_method = EtRuntime.get().load_program(pte).load_method("forward")
        ours = Runtime.get().load_program(pte).load_method("forward")
        np_inputs = [x.numpy() for x in inputs]
        got = ours.execute(np_inputs)[0]
        err = float(np.max(np.abs(got - want)))
        print(f"[bench] {name}: timing edgetorch", flush=True)
        time.sleep(1.0)  # let torch's and ExecuTorch's worker threads park before timing
        t_ours = median_time(lambda m=ours, x=np_inputs: m.execute(x))
        print(f"[bench] {name}: timing ExecuTorch portable", flush=True)
        time.sleep(1.0)
        t_et = median_time(lambda m=et_method, x=inputs: m.execute(list(x)), min_runs=3, budget_s=60)
        rows.append([name, fmt_ms(t_ours), fmt_ms(t_et), f"{t_et / t_ours:.1f}x", f"{err:.1e}"])
        print(
            table(["model", "edgetorch ms", "ET portable ms", "speed-up", "max |err| vs eager"], rows[-1:]), flush=True
        )
    out = table(["model", "edgetorch ms", "ET portable ms", "speed-up", "max |err| vs eager"], rows)
    print("\n" + out)
    results = pathlib.Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "portable.md").write_text(
        "# edgetorch runtime vs ExecuTorch portable kernels\n\n"
        f"Same .pte (written by ExecuTorch 1.5.1, no delegate), one process, {args.threads} threads, median latency.\n"
        "Command: `.venv/bin/python bench/portable.py`\n\n" + out + "\n"
    )


if __name__ == "__main__":
    main()
