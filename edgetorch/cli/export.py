"""``edgetorch export FILE.py:FACTORY -o model.pte [--backend NAME]``; imports torch when run."""

from __future__ import annotations

import argparse
import pathlib
import time
from collections import Counter
from typing import Any

from edgetorch.cli._common import load_factory

BACKENDS = ("portable", "xnnpack")


def cmd_export(args: argparse.Namespace) -> int:
    import torch

    from edgetorch.exir import to_edge, to_edge_transform_and_lower

    made = load_factory(args.factory)()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise ValueError("FACTORY() must return (module, example_args) or (module, example_args, dynamic_shapes)")
    module, example, dynamic = (*made, None)[:3]
    t0 = time.perf_counter()
    ep = torch.export.export(module.eval(), tuple(example), dynamic_shapes=dynamic)
    t_export = time.perf_counter() - t0
    t0 = time.perf_counter()
    if args.backend == "xnnpack":
        from edgetorch.backends.xnnpack import XnnpackPartitioner

        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    else:
        edge = to_edge(ep)
    graph = edge.exported_program().graph
    delegated = sum(1 for n in graph.nodes if n.op == "call_function" and "call_delegate" in str(n.target))
    program = edge.to_executorch()
    t_lower = time.perf_counter() - t0
    program.save(args.output)
    ops = Counter(
        str(n.target).split(".")[-2] if "." in str(n.target) else str(n.target)
        for n in program.exported_program().graph.nodes
        if n.op == "call_function" and "alloc" not in str(n.target)
    )
    size = pathlib.Path(args.output).stat().st_size
    print(f"exported {args.factory} -> {args.output}")
    print(f"  torch.export {t_export:.2f} s, lowering {t_lower:.2f} s, backend {args.backend}")
    print(f"  delegate calls: {delegated}")
    print(f"  operators ({sum(ops.values())} calls): " + ", ".join(f"{k} x{v}" for k, v in ops.most_common(12)))
    from edgetorch.runtime import Runtime

    meta = Runtime.get().load_program(args.output).metadata("forward")
    print(f"  planned memory: {sum(meta.planned_buffer_sizes)} bytes; file size: {size} bytes")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser(
        "export", help="export FILE.py:FACTORY to a .pte (FACTORY returns (module, example_args[, dynamic_shapes]))"
    )
    p.add_argument("factory", metavar="FILE.py:FACTORY")
    p.add_argument("-o", "--output", required=True, help="where to write the .pte")
    p.add_argument(
        "--backend", choices=BACKENDS, default="portable", help="delegate to a backend (default: portable kernels only)"
    )
    p.set_defaults(func=cmd_export)
