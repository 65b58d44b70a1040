"""``edgetorch fuzz [FILE.py:FACTORY]``: differential fuzzing; prints the first minimal divergence from eager.

Without FILE, modules come from the built-in generator (random operator sequences, shapes and dtypes, dynamic
batch dims, buffers, ``torch.cond``), case ``i`` of ``--seed S`` always the same. With ``FILE.py:FACTORY``,
``FACTORY(index)`` returns a new ``(module, example_args[, dynamic_shapes])`` per case, or ``FACTORY()`` one
module that each case runs on new inputs. Each module is exported by edgetorch (portable, and XNNPACK-lowered
unless ``--backend portable``), run twice on edgetorch's runtime (buffers carry over) and compared with eager.
The first finding is shrunk to a minimal module printed as source (generated cases), with the first operator
that diverges, as ``edgetorch debug`` prints it; exit 1 when there is a finding. Imports torch.
"""

from __future__ import annotations

import argparse
from typing import Any

from edgetorch.cli._common import EXIT_ERROR, EXIT_OK, load_factory


def register(sub: Any) -> None:
    p = sub.add_parser("fuzz", help="differential fuzzing against PyTorch eager; print the first minimal divergence")
    p.add_argument("factory", nargs="?", metavar="FILE.py:FACTORY", help="modules to check (default: generated)")
    p.add_argument("--cases", type=int, default=50, help="modules (or input draws) to check (default 50)")
    p.add_argument("--seed", type=int, default=0, help="the campaign's seed: case i of seed S is always the same")
    p.add_argument("--backend", choices=("all", "portable", "xnnpack"), default="all", help="lowerings to check")
    p.add_argument("--seconds", type=float, help="stop starting new cases after this long")
    p.add_argument("--shrink-budget", type=int, default=60, help="checks the shrinker may spend (default 60)")
    p.add_argument("--quiet", action="store_true", help="no line per case")
    p.set_defaults(func=cmd_fuzz)


def cmd_fuzz(args: argparse.Namespace) -> int:
    from edgetorch.devtools.fuzz import fuzz
    from edgetorch.devtools.fuzz.harness import DEFAULT_CONTENDERS

    if args.cases < 1:
        raise ValueError(f"--cases must be at least 1, got {args.cases}")
    contenders = tuple(c for c in DEFAULT_CONTENDERS if args.backend in ("all", c.lowering.backend))
    factory = load_factory(args.factory) if args.factory else None

    def progress(index: int, report: Any) -> None:
        if args.quiet:
            return
        if report.skipped:
            print(f"case {index}: skipped: {report.skipped}", flush=True)
        else:
            notes = [f"{o.contender}: {o.status}" for o in report.outcomes if o.status != "ok"]
            print(f"case {index}: " + ("; ".join(notes) if notes else "agrees with eager"), flush=True)

    campaign = fuzz(
        args.cases,
        seed=args.seed,
        contenders=contenders,
        factory=factory,
        shrink_budget=args.shrink_budget,
        seconds=args.seconds,
        on_case=progress,
    )
    print(campaign.summary())
    if not campaign.findings:
        return EXIT_OK
    print(campaign.findings[0].describe())
    return EXIT_ERROR
