"""``edgetorch debug FILE.py:FACTORY``: export, run eager and the runtime, report the first operator that diverges.

``FACTORY()`` returns ``(module, example_args)`` as for ``edgetorch export``. ``--inputs data.npz`` runs on
those inputs (``arr_0``, ``arr_1``, ... in order) instead of the example arguments: the real inputs that
fail where random ones pass. Prints the gap of every operator with its source line and exits 1 when one
diverges; ``--plot gap.png`` draws the gap along the graph. Imports torch.
"""

from __future__ import annotations

import argparse
from typing import Any

from edgetorch.cli._common import EXIT_ERROR, EXIT_OK, load_factory, load_npz_inputs
from edgetorch.cli.export import BACKENDS


def register(sub: Any) -> None:
    p = sub.add_parser("debug", help="find the first operator whose runtime output differs from PyTorch eager")
    p.add_argument("factory", metavar="FILE.py:FACTORY", help="returns (module, example_args)")
    p.add_argument("--inputs", metavar="DATA.npz", help="run on these inputs instead of the example arguments")
    p.add_argument("--backend", choices=BACKENDS, default="portable", help="lower as edgetorch export does")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance per operator (default 1e-4)")
    p.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance per operator (default 1e-5)")
    p.add_argument("--plot", metavar="OUT.png", help="draw the gap per operator along the graph")
    p.set_defaults(func=cmd_debug)


def cmd_debug(args: argparse.Namespace) -> int:
    import torch

    from edgetorch.devtools.debug import find_divergence

    made = load_factory(args.factory)()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise ValueError("FACTORY() must return (module, example_args) or (module, example_args, dynamic_shapes)")
    module, example, dynamic = (*made, None)[:3]
    inputs = tuple(example)
    if args.inputs:
        inputs = tuple(torch.from_numpy(a) for a in load_npz_inputs(args.inputs))
    ep = torch.export.export(module.eval(), tuple(example), dynamic_shapes=dynamic)
    program = None
    if args.backend == "xnnpack":
        from edgetorch.backends.xnnpack import XnnpackPartitioner
        from edgetorch.exir import to_edge_transform_and_lower

        edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], generate_etrecord=True)
        program = edge.to_executorch()
    report = find_divergence(ep, inputs, program, rtol=args.rtol, atol=args.atol)
    print(report)
    if args.plot:
        report.plot(args.plot)
        print(f"wrote {args.plot}")
    return EXIT_OK if report.first is None else EXIT_ERROR
