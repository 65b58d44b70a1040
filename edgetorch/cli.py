"""The ``edgetorch`` command: run, inspect, ops, export, bench.

``run``, ``inspect`` and ``ops`` are torch-free; ``export`` imports the compiler
(and so torch) only when it is used. Errors print one line and exit 1; pass
``--verbose`` for the traceback.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

EXIT_OK, EXIT_ERROR = 0, 1  # argparse itself exits with 2 on a usage error


def _load(path: str) -> Any:
    from edgetorch.runtime import Runtime

    return Runtime.get().load_program(path)


def _summary(x: Any) -> str:
    import numpy as np

    if not isinstance(x, np.ndarray):
        return f"{type(x).__name__} {x!r}"
    head = f"shape={list(x.shape)} dtype={x.dtype}"
    if x.size == 0:
        return head + " (empty)"
    if x.dtype.kind in "fiub":
        v = x.astype(np.float64)
        return head + f" min={v.min():.6g} max={v.max():.6g} mean={v.mean():.6g}"
    return head


def _random_input(info: Any, rng: Any) -> Any:

    if isinstance(info, str):
        raise ValueError(f"cannot make a random {info} input; pass it with --input")
    if info.numpy_dtype.kind == "f":
        return rng.standard_normal(info.sizes).astype(info.numpy_dtype)
    if info.numpy_dtype.kind == "b":
        return rng.integers(0, 2, info.sizes).astype(bool)
    return rng.integers(0, 10, info.sizes).astype(info.numpy_dtype)


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    program = _load(args.program)
    method = program.load_method(args.method)
    meta = method.metadata
    if args.input:
        inputs = [np.load(p, allow_pickle=False) for p in args.input]
    elif args.random or meta.num_inputs == 0:
        rng = np.random.default_rng(args.seed)
        inputs = [_random_input(meta.input_tensor_meta(i), rng) for i in range(meta.num_inputs)]
    else:
        raise ValueError(
            f"method {args.method!r} takes {meta.num_inputs} inputs; pass --input FILE.npy for each, or --random"
        )
    outputs = method.execute(inputs)
    times = []
    for _ in range(max(args.iterations, 1)):
        t0 = time.perf_counter()
        method.execute(inputs)
        times.append(time.perf_counter() - t0)
    for i, out in enumerate(outputs):
        print(f"output {i}: {_summary(out)}")
        if args.output:
            np.save(f"{args.output}_{i}.npy", out)
    times.sort()
    print(f"latency: median {times[len(times) // 2] * 1e3:.3f} ms over {len(times)} runs (min {times[0] * 1e3:.3f} ms)")
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    program = _load(args.program)
    prog = program.program
    print(f"program: {args.program}")
    print(f"  methods: {', '.join(program.get_method_name(i) for i in range(program.num_methods))}")
    for plan in prog.execution_plan:
        meta = program.metadata(plan.name)
        print(f"\nmethod {plan.name!r}: {meta.num_instructions} instructions, {len(plan.values)} values")
        for i in range(meta.num_inputs):
            print(f"  input  {i}: {meta.input_tensor_meta(i)}")
        for i in range(meta.num_outputs):
            print(f"  output {i}: {meta.output_tensor_meta(i)}")
        counts: Counter[str] = Counter()
        for chain in plan.chains:
            for ins in chain.instructions:
                a = ins.instr_args
                if type(a).__name__ == "KernelCall" and 0 <= a.op_index < len(plan.operators):
                    op = plan.operators[a.op_index]
                    counts[f"{op.name}.{op.overload}" if op.overload else op.name] += 1
                else:
                    counts[f"<{type(a).__name__}>"] += 1
        if counts:
            print("  operators:")
            for name, n in counts.most_common():
                print(f"    {n:5d}  {name}")
        for d in plan.delegates:
            where = "inline" if int(d.processed.location) == 0 else "segment"
            print(f"  delegate: {d.id} ({where} {d.processed.index}, {len(d.compile_specs)} compile specs)")
        for mem_id, size in enumerate(meta.planned_buffer_sizes, start=1):
            print(f"  planned memory id {mem_id}: {size} bytes")
    const_bytes = 0
    if prog.constant_segment is not None and prog.segments and prog.constant_segment.segment_index < len(prog.segments):
        const_bytes = prog.segments[prog.constant_segment.segment_index].size
    const_bytes += sum(len(b.storage) for b in prog.constant_buffer)
    print(f"\nconstant bytes: {const_bytes}")
    print(f"segments: {len(prog.segments)}")
    for i, seg in enumerate(prog.segments):
        print(f"  segment {i}: offset {seg.offset}, {seg.size} bytes")
    for nd in prog.named_data or []:
        print(f"  named data {nd.key!r} -> segment {nd.segment_index}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="edgetorch", description="Export, inspect and run ExecuTorch .pte programs.")
    parser.add_argument("--verbose", action="store_true", help="print tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a method of a .pte program and print its outputs and latency")
    run.add_argument("program", help="path to a .pte file")
    run.add_argument("--method", default="forward", help="method to run (default: forward)")
    run.add_argument("--input", action="append", metavar="FILE.npy", help="an input, once per method input, in order")
    run.add_argument("--random", action="store_true", help="feed seeded random inputs of the planned shapes")
    run.add_argument("--seed", type=int, default=0, help="seed for --random")
    run.add_argument("--iterations", type=int, default=10, help="timed runs after the first (default 10)")
    run.add_argument("--output", metavar="PREFIX", help="save outputs as PREFIX_<i>.npy")
    run.set_defaults(func=cmd_run)

    inspect = sub.add_parser("inspect", help="print a program's methods, operators, delegates, memory and segments")
    inspect.add_argument("program", help="path to a .pte file")
    inspect.set_defaults(func=cmd_inspect)
    for register in _EXTRA_COMMANDS:
        register(sub)
    return parser


def _register_export(sub: Any) -> None:
    from edgetorch.cli_export import register

    register(sub)


def _register_bench(sub: Any) -> None:
    from edgetorch.cli_bench import register

    register(sub)


_EXTRA_COMMANDS: list = [_register_export, _register_bench]

import edgetorch.cli_ops  # noqa: E402, F401  (appends the ``ops`` subcommand)


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
