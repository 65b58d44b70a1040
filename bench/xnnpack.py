"""The XNNPACK slice of the suite, for quick iteration on the delegate: edgetorch vs ExecuTorch XNNPACK and ORT.

Same measurement as bench/suite.py (one process, 2 threads, median latency) with
three contenders only; prints the latency and ratio tables, writes nothing.

    .venv/bin/python bench/xnnpack.py [--models mlp,resnet18] [--quick]
"""

from __future__ import annotations

import argparse
import logging
import pathlib
import sys
import tempfile
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env  # noqa: E402

reexec_with_clean_blas_env()

from bench.harness import set_threads  # noqa: E402
from bench.suite import FULL, QUICK, latency_table, ratio_table, run_suite  # noqa: E402

MODELS = ("mlp", "mobilenet_v2", "resnet18", "vit_tiny", "gpt2")
CONTENDERS = ("edgetorch-xnnpack", "et-xnnpack", "ort")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--quick", action="store_true", help="one timed run per contender")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    set_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="edgetorch-xnnpack-bench-") as tmp:
        results = run_suite(args.models.split(","), CONTENDERS, QUICK if args.quick else FULL, pathlib.Path(tmp))
    comparisons = (("edgetorch-xnnpack", "et-xnnpack"), ("edgetorch-xnnpack", "ort"))
    print("\n" + latency_table(results) + "\n\n" + ratio_table(results, comparisons))


if __name__ == "__main__":
    main()
