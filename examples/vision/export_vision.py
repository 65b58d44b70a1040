"""Step 1 of the vision example (imports torch): EfficientNet-Lite0 to an fp32 and an int8 .pte, and eager's answers.

Both programs are lowered by edgetorch's ``to_edge_transform_and_lower`` with its ``XnnpackPartitioner``; the
int8 one is quantized first with edgetorch's ``XNNPACKQuantizer`` (static, per-channel symmetric weights),
calibrated on the photos. Writes into OUT_DIR: ``lite0_fp32.pte``, ``lite0_int8.pte``, ``eager.npz`` (eager's
logits per photo), ``export.json`` (timings and sizes) and ``photos/*.png`` (for ``edgetorch eval``).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from lite0 import efficientnet_lite0, quantize_int8, weights_path  # noqa: E402
from photos import PHOTOS, inputs, save_photos  # noqa: E402

PROGRAMS = ("fp32", "int8")


def lower(ep: torch.export.ExportedProgram) -> bytes:
    """``ep`` lowered to XNNPACK by edgetorch, as .pte bytes."""
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=pathlib.Path)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)

    print(
        f"  loading EfficientNet-Lite0 with {weights_path().name}; {len(PHOTOS)} photos from skimage.data", flush=True
    )
    model = efficientnet_lite0()
    photos = inputs()
    example = (torch.from_numpy(photos[next(iter(PHOTOS))]),)
    info: dict = {"photos": list(PHOTOS), "torch": torch.__version__, "threads": torch.get_num_threads()}

    print("  fp32: torch.export, then edgetorch's to_edge_transform_and_lower + XnnpackPartitioner", flush=True)
    t0 = time.perf_counter()
    fp32 = lower(torch.export.export(model, example))
    info["fp32_export_s"] = time.perf_counter() - t0

    print("  int8: XNNPACKQuantizer (per-channel), calibrated on the photos, then the same lowering", flush=True)
    t0 = time.perf_counter()
    int8 = lower(quantize_int8(model, photos.values()))
    info["int8_export_s"] = time.perf_counter() - t0

    for name, pte in zip(PROGRAMS, (fp32, int8)):
        (args.out_dir / f"lite0_{name}.pte").write_bytes(pte)
        info[f"{name}_bytes"] = len(pte)
        print(f"  wrote lite0_{name}.pte ({len(pte) / 1e6:.1f} MB)", flush=True)

    print("  eager reference logits and latency", flush=True)
    with torch.inference_mode():
        logits = np.concatenate([model(torch.from_numpy(x)).numpy() for x in photos.values()])
        times = []
        for _ in range(10):
            t0 = time.perf_counter()
            model(*example)
            times.append(time.perf_counter() - t0)
    np.savez(args.out_dir / "eager.npz", logits=logits)
    info["eager_ms"] = float(np.median(times) * 1e3)
    (args.out_dir / "export.json").write_text(json.dumps(info, indent=2))
    save_photos(args.out_dir / "photos")


if __name__ == "__main__":
    main()
