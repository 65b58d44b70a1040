"""``edgetorch eval PROGRAM --data DATA``: evaluate a program over a dataset on Ray (``edgetorch[ray]``).

DATA is a folder of ``.npy``/``.npz`` files or images, or a Parquet file; images are resized to the program's
input size (or ``--image-size``) and scaled as ``--image-scale`` says. The reference is another program
(``--reference``) or an eager model (``--eager FILE.py:FACTORY``, run in actors of its own); without one, top1
compares against the labels. Prints a progress bar, then a summary table; writes the per-sample results as
Parquet and the metric's histogram as a PNG. The program's workers are torch-free.
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from edgetorch.cli._common import EXIT_ERROR, EXIT_OK


def register(sub: Any) -> None:
    from edgetorch.extension.ray.metrics import METRICS
    from edgetorch.extension.ray.samples import IMAGE_SCALES

    ev = sub.add_parser("eval", help="evaluate a .pte over a dataset on Ray: per-sample metric, summary, histogram")
    ev.add_argument("program", help="path to the .pte to evaluate")
    ev.add_argument("--data", required=True, help="a folder of .npy/.npz files or images, or a .parquet file")
    ref = ev.add_mutually_exclusive_group()
    ref.add_argument("--reference", metavar="REF.pte", help="a program to compare against (an fp32 build)")
    ref.add_argument("--eager", metavar="FILE.py:FACTORY", help="an eager PyTorch model to compare against")
    ev.add_argument(
        "--metric", choices=METRICS, help="per-sample metric (default: sqnr with a reference, top1 against labels)"
    )
    ev.add_argument(
        "--image-scale",
        choices=IMAGE_SCALES,
        default="imagenet",
        help="how image pixels become inputs: imagenet (torchvision's mean/std, the default), unit ([0, 1]), "
        "symmetric ([-1, 1]: EfficientNet-Lite, TensorFlow's MobileNets)",
    )
    ev.add_argument(
        "--image-size",
        type=int,
        metavar="N",
        help="resize images to N x N (default: the program's planned input height and width)",
    )
    ev.add_argument("--method", default="forward", help="method to run (default: forward)")
    ev.add_argument("--address", help="join the Ray cluster at this address (default: start a local Ray)")
    ev.add_argument("--workers", type=int, default=2, help="actors running the program (default 2)")
    ev.add_argument("--batch-size", type=int, default=16, help="samples per Ray batch (default 16)")
    ev.add_argument(
        "--output", default="results.parquet", help="per-sample results as Parquet (default results.parquet)"
    )
    ev.add_argument("--histogram", help="the metric's histogram as a PNG (default: the output's name with .png)")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.set_defaults(func=cmd_eval)


def cmd_eval(args: argparse.Namespace) -> int:
    from edgetorch.extension.ray import SampleReader, evaluate

    output = pathlib.Path(args.output)
    histogram = pathlib.Path(args.histogram) if args.histogram else output.with_suffix(".png")
    result = evaluate(
        args.program,
        args.data,
        reference=args.reference,
        eager=args.eager,
        metric=args.metric,
        method=args.method,
        address=args.address,
        workers=args.workers,
        batch_size=args.batch_size,
        output=output,
        progress=not args.no_progress,
        reader=SampleReader(image_scale=args.image_scale, image_size=args.image_size),
    )
    print(result.format_summary())
    print(f"wrote {output} ({result.table.num_rows} rows)")
    try:
        result.save_histogram(histogram)
        print(f"wrote {histogram}")
    except ImportError as e:
        print(f"no histogram: {e}")
    return EXIT_OK if result.summary()["ok"] else EXIT_ERROR
