"""What ``trimmed_decompositions`` saves a lowering: edgetorch's XNNPACK lowering (``to_edge_transform_and_lower``
+ ``to_executorch``) of bench models with torch's decomposition as it is and with its two fixed costs trimmed
(edgetorch/exir/passes/decompose.py), taken in turn in one process; the best of ``--rounds`` each. Example::

    python bench/export_overhead.py --models mlp,resnet18,vit_tiny --rounds 3
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,resnet18,vit_tiny")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    warnings.filterwarnings("ignore")
    import torch

    import edgetorch.exir as exir
    from bench.models import MODELS
    from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    decompose = importlib.import_module("edgetorch.exir.passes.decompose")  # the package exports a function
    trims = (decompose._MATERIALIZE_CIA, decompose._ANNOTATED)
    print("| model | torch as is, s | trimmed, s | ratio |\n|---|---|---|---|")
    for name in opts.models.split(","):
        model, args = MODELS[name]()
        program = torch.export.export(model.eval(), args)
        best = {"as is": float("inf"), "trimmed": float("inf")}
        for _ in range(opts.rounds):
            for setting in best:
                decompose._MATERIALIZE_CIA, decompose._ANNOTATED = trims if setting == "trimmed" else (None, None)
                t0 = time.perf_counter()
                exir.to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()]).to_executorch()
                best[setting] = min(best[setting], time.perf_counter() - t0)
        decompose._MATERIALIZE_CIA, decompose._ANNOTATED = trims
        print(f"| {name} | {best['as is']:.2f} | {best['trimmed']:.2f} | {best['trimmed'] / best['as is']:.2f} |")


if __name__ == "__main__":
    main()
