"""``edgetorch run PROGRAM``: run a method with given, bundled or seeded random inputs; print outputs and latency.

``--etdump out.etdp [--debug-buffer out.bin --debug-level none|outputs|intermediates]`` traces every run into an
ETDump that ExecuTorch's Inspector reads. A ``.bpte`` runs the program it bundles; ``--bundled-input-index N``
feeds test case N's inputs (as ExecuTorch's ``load_bundled_input``) and ``--verify`` checks the outputs against
the expected ones of that test case, or of every test case of the method when no index is given. Torch-free.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from edgetorch.cli._common import EXIT_ERROR, EXIT_OK, load_program

DEBUG_LEVELS = {"none": 0, "outputs": 1, "intermediates": 2}


def register(sub: Any) -> None:
    run = sub.add_parser("run", help="run a method of a .pte (or .bpte) program and print its outputs and latency")
    run.add_argument("program", help="path to a .pte file, or a .bpte bundled program")
    run.add_argument("--method", default="forward", help="method to run (default: forward)")
    run.add_argument("--input", action="append", metavar="FILE.npy", help="an input, once per method input, in order")
    run.add_argument("--random", action="store_true", help="feed seeded random inputs of the planned shapes")
    run.add_argument("--seed", type=int, default=0, help="seed for --random")
    run.add_argument("--iterations", type=int, default=10, help="timed runs after the first (default 10)")
    run.add_argument("--output", metavar="PREFIX", help="save outputs as PREFIX_<i>.npy")
    run.add_argument("--etdump", metavar="OUT.etdp", help="trace every run and write the ETDump here")
    run.add_argument("--debug-buffer", metavar="OUT.bin", help="with --etdump: write the logged values here")
    run.add_argument(
        "--debug-level",
        choices=list(DEBUG_LEVELS),
        help="values to log into the debug buffer (default: intermediates with --debug-buffer, else none)",
    )
    run.add_argument(
        "--track-allocations",
        action="store_true",
        help="with --etdump: record each method's planned and unplanned memory",
    )
    run.add_argument("--verify", action="store_true", help="check a .bpte's outputs against its expected outputs")
    run.add_argument(
        "--bundled-input-index", type=int, metavar="N", help="run a .bpte's test case N (default with --verify: all)"
    )
    run.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance of --verify")
    run.add_argument("--atol", type=float, default=1e-8, help="absolute tolerance of --verify")
    run.set_defaults(func=cmd_run)


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


def _tracer(args: argparse.Namespace) -> Any:
    """The ETDumpGen ``--etdump`` asks for, or None."""
    from edgetorch.runtime.etdump import ETDumpGen

    if args.etdump is None:
        if args.debug_buffer or args.debug_level or args.track_allocations:
            raise ValueError("--debug-buffer, --debug-level and --track-allocations need --etdump OUT.etdp")
        return None
    level = args.debug_level or ("intermediates" if args.debug_buffer else "none")
    if DEBUG_LEVELS[level] and not args.debug_buffer:
        raise ValueError(f"--debug-level {level} logs values into a debug buffer; pass --debug-buffer OUT.bin")
    # the buffer grows as values arrive; the size is only the cap
    return ETDumpGen((1 << 40) if DEBUG_LEVELS[level] else 0, DEBUG_LEVELS[level], args.track_allocations)


def _bundle(args: argparse.Namespace) -> Any:
    """The BundledProgram in ``args.program`` when ``--verify`` or ``--bundled-input-index`` asks for one."""
    from edgetorch.format.bundled_program import is_bundled_program
    from edgetorch.runtime.bundled import load_bundled_program

    if not args.verify and args.bundled_input_index is None:
        return None
    with open(args.program, "rb") as f:
        data = f.read()
    if not is_bundled_program(data):
        raise ValueError(
            f"{args.program} is not a bundled program (.bpte); --verify and --bundled-input-index need one "
            "(make it with edgetorch.devtools.bundled_program)"
        )
    if args.input or args.random:
        raise ValueError("a bundled test case brings its own inputs; drop --input/--random")
    return load_bundled_program(data)


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    tracer = _tracer(args)
    bundle = _bundle(args)
    program = load_program(args.program)
    method = program.load_method(args.method, event_tracer=tracer)
    if bundle is not None:
        code = _run_bundled(args, bundle, method, tracer)
    else:
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
        _run_timed(args, method, inputs)
        code = EXIT_OK
    if tracer is not None:
        tracer.write_etdump(args.etdump, args.debug_buffer)
        print(f"wrote ETDump {args.etdump} ({tracer.get_num_blocks()} blocks)")
    return code


def _run_timed(args: argparse.Namespace, method: Any, inputs: list[Any]) -> list[Any]:
    import numpy as np

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
    return outputs


def _run_bundled(args: argparse.Namespace, bundle: Any, method: Any, tracer: Any) -> int:
    """Run the chosen test cases of ``bundle`` (timed), verifying each when ``--verify``; the exit code."""
    from edgetorch.runtime.bundled import (
        BundledVerificationError,
        bundled_expected_outputs,
        bundled_inputs,
        num_test_cases,
        verify_outputs,
    )

    n = num_test_cases(bundle, args.method)
    if n == 0:
        raise ValueError(f"{args.program} bundles no test cases for method {args.method!r}; pick one with --method")
    indices = range(n) if args.bundled_input_index is None else [args.bundled_input_index]
    failed = 0
    for index in indices:
        inputs = bundled_inputs(bundle, args.method, index)  # checks the index
        if tracer is not None:
            tracer.set_bundled_input_index(index)
        print(f"test case {index}:")
        outputs = _run_timed(args, method, inputs)
        if args.verify:
            expected = bundled_expected_outputs(bundle, args.method, index)
            try:
                verify_outputs(outputs, expected, args.method, index, args.rtol, args.atol)
                print(f"test case {index}: outputs match")
            except BundledVerificationError as e:
                failed += 1
                print(f"FAIL {e}")
    if args.verify:
        print(f"{args.method}: {len(indices) - failed} of {len(indices)} test cases match")
    return EXIT_ERROR if failed else EXIT_OK
