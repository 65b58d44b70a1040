"""The ``edgetorch devtools`` command: trace a run into an ETDump, inspect it, verify a bundled program.

* ``edgetorch devtools etdump model.pte --inputs in.npz -o out.etdp [--debug-buffer out.bin]
  [--level intermediates|outputs|none] [--runs N]`` runs the program traced and writes the ETDump;
* ``edgetorch devtools inspect --etdump out.etdp [--etrecord etrecord.bin] [--debug-buffer out.bin]
  [--tsv out.tsv]`` prints the Inspector's table (as ExecuTorch's ``inspector_cli``);
* ``edgetorch devtools verify model.bpte`` runs every bundled test case and checks its outputs.

``etdump`` and ``verify`` are torch-free; ``inspect`` imports the Inspector (torch, pandas, tabulate).
"""

from __future__ import annotations

import argparse
from typing import Any

from edgetorch.cli._common import EXIT_ERROR, EXIT_OK, load_npz_inputs
from edgetorch.cli.run import DEBUG_LEVELS as _LEVELS


def register(subparsers: Any) -> None:
    """Add the ``devtools`` subcommand to the ``edgetorch`` parser."""
    dev = subparsers.add_parser("devtools", help="ETDump tracing, the Inspector table, bundled-program checks")
    sub = dev.add_subparsers(dest="tool", required=True)
    trace = sub.add_parser("etdump", help="run a program with the event tracer and write an ETDump")
    trace.add_argument("program", help=".pte (or .bpte) file")
    trace.add_argument("--inputs", required=True, help=".npz with the method's inputs (arr_0, arr_1, ... in order)")
    trace.add_argument("-o", "--etdump", required=True, help="ETDump file to write")
    trace.add_argument("--debug-buffer", help="also write the logged tensors here")
    trace.add_argument("--level", choices=sorted(_LEVELS), default="intermediates", help="values to log")
    trace.add_argument("--method", default="forward")
    trace.add_argument("--runs", type=int, default=1)
    trace.set_defaults(func=cmd_etdump)
    inspect = sub.add_parser("inspect", help="print the Inspector's table of an ETDump")
    inspect.add_argument("--etdump", required=True)
    inspect.add_argument("--etrecord")
    inspect.add_argument("--debug-buffer")
    inspect.add_argument("--tsv", help="also save the table as tab-separated values")
    inspect.set_defaults(func=cmd_inspect)
    verify = sub.add_parser("verify", help="run a .bpte's test cases and check the outputs")
    verify.add_argument("bundle", help=".bpte file")
    verify.add_argument("--rtol", type=float, default=1e-5)
    verify.add_argument("--atol", type=float, default=1e-8)
    verify.set_defaults(func=cmd_verify)


def cmd_etdump(args: argparse.Namespace) -> int:
    from edgetorch.runtime import Runtime
    from edgetorch.runtime.etdump import ETDumpGen

    inputs = load_npz_inputs(args.inputs)
    level = _LEVELS[args.level]
    tracer = ETDumpGen((1 << 31) if level and args.debug_buffer else 0, level)  # the buffer grows as needed
    method = Runtime.get().load_program(args.program).load_method(args.method, event_tracer=tracer)
    for _ in range(args.runs):
        method.execute(inputs)
    tracer.write_etdump(args.etdump, args.debug_buffer)
    print(f"wrote {args.etdump} ({tracer.get_num_blocks()} blocks)")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    from edgetorch.devtools import Inspector

    inspector = Inspector(etdump_path=args.etdump, etrecord=args.etrecord, debug_buffer_path=args.debug_buffer)
    inspector.print_data_tabular()
    if args.tsv:
        with open(args.tsv, "w") as f:
            inspector.save_data_to_tsv(f)
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from edgetorch.runtime import Module
    from edgetorch.runtime.bundled import BundledVerificationError, load_bundled_program

    with open(args.bundle, "rb") as f:
        data = f.read()
    bundle, module = load_bundled_program(data), Module(data)
    failed = 0
    for suite in bundle.method_test_suites:
        for i in range(len(suite.test_cases)):
            module.load_bundled_input(bundle, suite.method_name, i)
            module.execute(suite.method_name)
            try:
                module.verify_result_with_bundled_expected_output(bundle, suite.method_name, i, args.rtol, args.atol)
            except BundledVerificationError as e:
                failed += 1
                print(f"FAIL {e}")
        print(f"{suite.method_name}: {len(suite.test_cases)} test cases")
    print("all outputs match" if not failed else f"{failed} test cases failed")
    return EXIT_OK if not failed else EXIT_ERROR
