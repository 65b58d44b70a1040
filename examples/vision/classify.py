"""Step 2 of the vision example, in a process where torch cannot be imported: classify the photos with both .pte files.

Prints each photo's top-5 ImageNet classes from the fp32 and the int8 program, run on the edgetorch
runtime, whether each top-1 agrees with PyTorch eager's, and the latency per photo against eager's.
Exits non-zero when the fp32 program's top-1 differs from eager's on any photo, or the int8 program's on
more than one.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

for _blocked in ("torch", "executorch"):
    sys.modules[_blocked] = None  # importing either now raises ImportError

import numpy as np  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from photos import PHOTOS, imagenet_labels, inputs, softmax, top_k  # noqa: E402

from edgetorch.runtime import Runtime  # noqa: E402

PROGRAMS = ("fp32", "int8")
INT8_MISSES_ALLOWED = 1


def classify(pte: pathlib.Path, photos: dict[str, np.ndarray]) -> tuple[np.ndarray, float]:
    """Logits per photo (one row each) from the program ``pte``, and its median latency per photo in ms."""
    method = Runtime.get().load_program(pte).load_method("forward")
    logits = np.concatenate([method.execute([x])[0] for x in photos.values()])
    first = next(iter(photos.values()))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        method.execute([first])
        times.append(time.perf_counter() - t0)
    return logits, float(np.median(times) * 1e3)


def main() -> None:
    out_dir = pathlib.Path(sys.argv[1])
    info = json.loads((out_dir / "export.json").read_text())
    labels = imagenet_labels()
    photos = inputs()
    eager = np.load(out_dir / "eager.npz")["logits"]
    results = {name: classify(out_dir / f"lite0_{name}.pte", photos) for name in PROGRAMS}

    for i, (photo, what) in enumerate(PHOTOS.items()):
        print(f"\n{photo} ({what}):")
        for name in PROGRAMS:
            probs = softmax(results[name][0][i])
            best = ", ".join(f"{labels[c]} {probs[c]:.0%}" for c in top_k(probs))
            print(f"  {name:>4}: {best}")
    eager_top1 = eager.argmax(1)
    misses = {
        name: [p for p, a, b in zip(PHOTOS, results[name][0].argmax(1), eager_top1) if a != b] for name in PROGRAMS
    }
    print(
        f"\ntop-1 agreement with PyTorch eager over {len(PHOTOS)} photos (edgetorch runtime, no torch in this process):"
    )
    for name in PROGRAMS:
        logits, ms = results[name]
        diff = float(np.abs(logits - eager).max())
        where = f" (differs on {', '.join(misses[name])})" if misses[name] else ""
        print(
            f"  {name:>4}: {len(PHOTOS) - len(misses[name])}/{len(PHOTOS)}{where}; largest |logit - eager| {diff:.2g}; "
            f"{ms:.1f} ms per photo, {info[f'{name}_bytes'] / 1e6:.1f} MB"
        )
    print(f"  PyTorch eager fp32: {info['eager_ms']:.1f} ms per photo")
    if misses["fp32"] or len(misses["int8"]) > INT8_MISSES_ALLOWED:
        raise SystemExit(
            f"top-1 differs from eager's on {misses}: expected the fp32 program to agree on every photo and the "
            f"int8 one on all but at most {INT8_MISSES_ALLOWED}"
        )


if __name__ == "__main__":
    main()
