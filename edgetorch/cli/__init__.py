"""The ``edgetorch`` command: run, inspect, ops, export, debug, bench, ...; one module per subcommand.

``run``, ``inspect`` and ``ops`` are torch-free; ``export`` imports the compiler
(and so torch) only when it is used. Errors print one line and exit 1; pass
``--verbose`` for the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from edgetorch.cli._common import EXIT_ERROR

# The subcommands, in the order ``edgetorch --help`` lists them: each names a module of this package
# with ``register(subparsers)``.
COMMANDS = ("run", "inspect", "ops", "export", "debug", "fuzz", "bench", "devtools", "llm", "asr", "eval", "warmup")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edgetorch", description="Export, inspect and run ExecuTorch .pte programs.")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"edgetorch.cli.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_ERROR
    except Exception as e:  # one clear line unless --verbose
        if args.verbose:
            raise
        print(f"edgetorch {args.command}: error: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
