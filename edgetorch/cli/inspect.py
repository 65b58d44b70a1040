"""``edgetorch inspect PROGRAM``: methods, inputs/outputs, operators, delegates, planned memory, segments. Torch-free.

``--memory-plot out.png`` also draws the memory plan (one panel per memory id; needs matplotlib) and
``--html out.html`` writes the program as a self-contained page with its graph (see ``edgetorch.devtools``).
``--kernels`` loads every method and prints, for each layer with a choice of kernels, the one chosen and why
(measured on this host, read from the cache, the only candidate, tuning off): see ``edgetorch.runtime.tuning``.
"""

from __future__ import annotations

import argparse
import textwrap
from collections import Counter
from typing import Any

from edgetorch.cli._common import EXIT_OK, load_program
from edgetorch.format.printer import format_plan


def register(sub: Any) -> None:
    inspect = sub.add_parser("inspect", help="print a program's methods, operators, delegates, memory and segments")
    inspect.add_argument("program", help="path to a .pte file")
    inspect.add_argument(
        "--instructions", action="store_true", help="also list every instruction with its values and memory"
    )
    inspect.add_argument("--memory-plot", metavar="OUT.png", help="draw the memory plan: tensors over instructions")
    inspect.add_argument("--html", metavar="OUT.html", help="write a self-contained HTML view of the program's graph")
    inspect.add_argument(
        "--kernels", action="store_true", help="load each method and print the kernel each layer runs and why"
    )
    inspect.set_defaults(func=cmd_inspect)


def cmd_inspect(args: argparse.Namespace) -> int:
    program = load_program(args.program)
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
        if args.instructions:
            print("  instructions:")
            print(textwrap.indent(format_plan(plan), "  "))
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
    if args.kernels:
        _print_kernels(program, [program.get_method_name(i) for i in range(program.num_methods)])
    if args.memory_plot:
        from edgetorch.devtools.memory_plan import plot_memory_timeline

        plot_memory_timeline(program, args.memory_plot)
        print(f"\nwrote memory plot {args.memory_plot}")
    if args.html:
        from edgetorch.devtools.html_view import save_program_html

        save_program_html(program, args.html, title=args.program)
        print(f"wrote HTML view {args.html}")
    return EXIT_OK


def _print_kernels(program: Any, names: list[str]) -> None:
    """Each method loaded, with the kernel decisions its load took (runtime/tuning.py)."""
    from edgetorch.runtime import policy, tuning

    current = policy.current()
    tier = "on" if policy.compiled_tier() else "off (NumPy kernels only: products run sgemm)"
    print(f"\nkernels: compiled tier {tier}; tuning {'on' if current.tune else 'off (EDGETORCH_TUNE=0)'}")
    if current.tune:
        print(f"  decisions cached in {tuning.cache_dir() / tuning.FILE_NAME}")
    for name in names:
        with tuning.recording() as log:
            program.load_method(name)
        print(f"  method {name!r}: {len(log)} choice{'s' if len(log) != 1 else ''}")
        for where, decision in log:
            print(f"    {where or '-'}: {decision.family} {decision.key} -> {decision.describe()}")
