"""The ``edgetorch ops`` command: which operators a program needs, and how the kernel library covers Core ATen.

* ``edgetorch ops model.pte [more.pte ...]`` lists each operator with the dtypes
  of its tensor arguments (torch-free); ``--selective-module out.py`` also writes
  a module that loads only those operators' kernels;
* ``edgetorch ops --coverage`` prints every Core ATen overload with its out
  variant, whether a kernel exists, the dtypes OpInfo samples verified and the
  result, read from the OpInfo results file (``bench/opinfo_compare.py`` writes
  it) or, with ``--verify``, from a quick run of the CI OpInfo set (needs torch).
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from edgetorch.cli._common import EXIT_OK

# Where the OpInfo sweep (bench/opinfo_compare.py) of a source checkout writes its results.
DEFAULT_RESULTS = pathlib.Path(__file__).resolve().parents[2] / "bench" / "results" / "opinfo.json"


def register(subparsers: Any) -> None:
    """Add the ``ops`` subcommand to the ``edgetorch`` parser."""
    ops = subparsers.add_parser("ops", help="list a program's operators, or the Core ATen coverage table")
    ops.add_argument("programs", nargs="*", metavar="PROGRAM", help=".pte files whose operators to list")
    ops.add_argument("--method", help="only this method (default: all methods)")
    ops.add_argument("--selective-module", metavar="OUT.py", help="write a module that loads only these kernels")
    ops.add_argument("--coverage", action="store_true", help="print the Core ATen coverage table")
    ops.add_argument("--results", metavar="JSON", help="OpInfo results file (default: bench/results/opinfo.json)")
    ops.add_argument("--verify", action="store_true", help="run the CI OpInfo samples now instead of reading results")
    ops.set_defaults(func=cmd_ops)


def cmd_ops(args: argparse.Namespace) -> int:
    if args.coverage:
        return _coverage(args)
    if not args.programs:
        raise ValueError("give one or more .pte files, or --coverage")
    return _program_ops(args)


def _program_ops(args: argparse.Namespace) -> int:
    from edgetorch.runtime import Runtime
    from edgetorch.runtime.selective import operators_in, write_selective_module

    needed: dict[str, set[tuple[str, ...]]] = {}
    for path in args.programs:
        for op, signatures in operators_in(Runtime.get().load_program(path), args.method).items():
            needed.setdefault(op, set()).update(signatures)
    width = max((len(op) for op in needed), default=0)
    for op, signatures in sorted(needed.items()):
        dtypes = "; ".join("(" + ", ".join(s) + ")" for s in sorted(signatures)) or "-"
        print(f"{op:{width}s}  {dtypes}")
    print(f"{len(needed)} operators")
    if args.selective_module:
        print(f"wrote {write_selective_module(args.selective_module, needed)}")
    return EXIT_OK


def _coverage(args: argparse.Namespace) -> int:
    from edgetorch.devtools import ops_coverage as oc

    if args.verify:
        results = oc.check_ops(oc.opinfos())
        source = "a quick run of the CI OpInfo set"
    else:
        path = pathlib.Path(args.results) if args.results else DEFAULT_RESULTS
        if not path.exists():
            raise FileNotFoundError(f"no OpInfo results at {path}; run bench/opinfo_compare.py, or pass --verify")
        results = oc.load_results(path)
        source = str(path)
    rows = oc.coverage_rows(results)
    headers = ("Core ATen overload", "out variant", "kernel", "dtypes verified", "result")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers[:-1])]
    for row in (headers, *rows):
        print("  ".join(f"{c:{w}s}" for c, w in zip(row, widths)) + "  " + row[-1])
    counts = {
        k: sum(r[-1].startswith(k) for r in rows) for k in ("verified", "FAIL", "unverified", "missing", "no out")
    }
    kernels = sum(r[2] == "yes" for r in rows)
    print(
        f"\n{len(rows)} Core ATen overloads: {kernels} with kernels; {counts['verified']} verified, "
        f"{counts['FAIL']} failing, {counts['unverified']} unverified; {counts['missing']} missing a kernel, "
        f"{counts['no out']} without an out variant (results from {source})"
    )
    print(f"Complex tensors and FFTs: {oc.COMPLEX_NOTE}.")
    return EXIT_OK
