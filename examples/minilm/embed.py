"""Step 2 of the main job, in a process where torch cannot be imported: embed sentences with the .pte.

Tokenises with the ``tokenizers`` library from the model's shipped ``tokenizer.json``, runs the
encoder in the edgetorch runtime, mean-pools, and prints a cosine-similarity table, the largest
difference from PyTorch eager's embeddings and the latency against eager.
"""

from __future__ import annotations

import importlib.abc
import json
import pathlib
import sys
import time


class _BlockTorch(importlib.abc.MetaPathFinder):
    """Proof that this step needs no PyTorch: any attempt to import it fails loudly."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "executorch"):
            raise ImportError(f"{name} is blocked: the edgetorch runtime must run without PyTorch")
        return None


sys.meta_path.insert(0, _BlockTorch())

import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import BATCH, SENTENCES, encode, mean_pool  # noqa: E402

from edgetorch.runtime import Runtime  # noqa: E402


def main() -> None:
    out_dir = pathlib.Path(sys.argv[1])
    info = json.loads((out_dir / "export.json").read_text())
    print("  tokenizing with tokenizers (tokenizer.json shipped with the model)", flush=True)
    ids, mask = encode(SENTENCES)
    t0 = time.perf_counter()
    method = Runtime.get().load_program(out_dir / "minilm.pte").load_method("forward")
    t_load = time.perf_counter() - t0
    print(f"  loaded minilm.pte in {t_load * 1e3:.0f} ms; embedding {len(SENTENCES)} sentences", flush=True)
    hidden = [method.execute([ids[s : s + BATCH], mask[s : s + BATCH]])[0] for s in range(0, len(ids), BATCH)]
    embeddings = mean_pool(np.concatenate(hidden), mask)[: len(SENTENCES)]
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        method.execute([ids[:BATCH], mask[:BATCH]])
        times.append(time.perf_counter() - t0)
    ours_ms = float(np.median(times) * 1e3)

    sims = embeddings @ embeddings.T
    print("\ncosine similarity (edgetorch runtime, no torch in this process):\n")
    labels = [f"s{i}" for i in range(len(SENTENCES))]
    print("      " + " ".join(f"{lab:>5}" for lab in labels))
    for i, row in enumerate(sims):
        print(f"{labels[i]:>5} " + " ".join(f"{v:5.2f}" for v in row))
    print()
    for i, s in enumerate(SENTENCES):
        best = max((j for j in range(len(SENTENCES)) if j != i), key=lambda j: sims[i, j])
        print(f"  s{i} {s!r:<52} closest: s{best} ({sims[i, best]:.2f})")
    eager = np.load(out_dir / "eager.npz")["embeddings"]
    diff = float(np.abs(embeddings - eager).max())
    print(f"\nlargest |edgetorch - eager| over all embedding values: {diff:.2e}")
    print(
        f"latency per batch of {BATCH}: edgetorch {ours_ms:.1f} ms ({info['backend']}), "
        f"PyTorch eager {info['eager_batch_ms']:.1f} ms ({info['eager_batch_ms'] / ours_ms:.2f}x eager's speed)"
    )
    if diff > 1e-3:
        raise SystemExit(f"embeddings differ from eager by {diff:.2e} (> 1e-3)")


if __name__ == "__main__":
    main()
