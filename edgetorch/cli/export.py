"""``edgetorch export FILE.py:FACTORY -o model.pte [--backend NAME] [--quantize SCHEME]``; imports torch when run."""

from __future__ import annotations

import argparse
import math
import pathlib
import time
from collections import Counter
from typing import Any

from edgetorch.cli._common import load_factory

BACKENDS = ("portable", "xnnpack")
QUANTIZE = ("int8", "int8-dynamic", "8da4w")


def _calibration_sets(spec: str | None, example: tuple) -> list[tuple]:
    """The input tuples static quantization observes: the --calibration callable's list, or the example inputs."""
    if spec is None:
        return [tuple(example)]
    sets = load_factory(spec)()
    try:
        sets = [tuple(s) if isinstance(s, (tuple, list)) else (s,) for s in sets]
    except TypeError:
        sets = []
    if not sets:
        raise ValueError(
            f"--calibration {spec} must return a non-empty list of input tuples, got {type(sets).__name__}"
        )
    return sets


def _quantized_program(module: Any, example: tuple, dynamic: Any, args: argparse.Namespace) -> Any:
    """``module`` quantized under ``args.quantize`` and exported.

    int8 and int8-dynamic: PT2E with edgetorch's XNNPACKQuantizer, per-channel symmetric int8 weights;
    int8 calibrates static activation ranges on the calibration inputs. 8da4w: torchao's ``quantize_``
    with int8 dynamic activations and 4-bit weights in groups of ``--group-size`` along each linear's input.
    """
    import torch

    if args.quantize == "8da4w":
        from torchao.quantization.granularity import PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

        group = args.group_size
        for name, m in module.named_modules():
            if isinstance(m, torch.nn.Linear) and m.in_features % group:
                raise ValueError(
                    f"--group-size {group} must divide every linear's input features; {name or 'the model'} has "
                    f"{m.in_features}: pick a divisor such as {math.gcd(group, m.in_features)}"
                )
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(group))
        quantize_(module, config)
        return torch.export.export(module, example, dynamic_shapes=dynamic)
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    is_dynamic = args.quantize == "int8-dynamic"
    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True, is_dynamic=is_dynamic)
    )
    prepared = prepare_pt2e(torch.export.export(module, example, dynamic_shapes=dynamic).module(), quantizer)
    with torch.no_grad():
        for inputs in [example] if is_dynamic else _calibration_sets(args.calibration, example):
            prepared(*inputs)
    return torch.export.export(convert_pt2e(prepared), example, dynamic_shapes=dynamic)


def cmd_export(args: argparse.Namespace) -> int:
    if args.quantize and args.backend != "xnnpack":
        raise ValueError(f"--quantize {args.quantize} targets XNNPACK: add --backend xnnpack")
    if args.calibration and args.quantize != "int8":
        raise ValueError("--calibration only applies to --quantize int8 (static activation ranges)")
    import torch

    from edgetorch.exir import to_edge, to_edge_transform_and_lower

    made = load_factory(args.factory)()
    if not isinstance(made, tuple) or len(made) not in (2, 3):
        raise ValueError("FACTORY() must return (module, example_args) or (module, example_args, dynamic_shapes)")
    module, example, dynamic = (*made, None)[:3]
    t0 = time.perf_counter()
    if args.quantize:
        ep = _quantized_program(module.eval(), tuple(example), dynamic, args)
    else:
        ep = torch.export.export(module.eval(), tuple(example), dynamic_shapes=dynamic)
    t_export = time.perf_counter() - t0
    t0 = time.perf_counter()
    if args.backend == "xnnpack":
        from edgetorch.backends.xnnpack import XnnpackPartitioner

        try:
            edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
        except Exception as e:  # noqa: BLE001 - any lowering failure of a quantized graph falls back, loudly
            if not args.quantize:
                raise
            # edgetorch's partitioner does not lower every quantized pattern yet; the quantized program
            # still runs everywhere with the portable quantized kernels, undelegated.
            print(
                f"  note: XNNPACK could not lower this quantized graph ({type(e).__name__}: {e}); "
                "exported without delegation"
            )
            edge = to_edge(ep)
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
    what = "torch.export" + (f" + {args.quantize} quantization" if args.quantize else "")
    print(f"  {what} {t_export:.2f} s, lowering {t_lower:.2f} s, backend {args.backend}")
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
    p.add_argument(
        "--quantize",
        choices=QUANTIZE,
        help="quantize for XNNPACK: int8 (static activations, per-channel weights), int8-dynamic "
        "(dynamic activations, per-channel weights), 8da4w (dynamic int8 activations, 4-bit grouped linear weights)",
    )
    p.add_argument("--group-size", type=int, default=32, help="8da4w: weights per 4-bit scale (default 32)")
    p.add_argument(
        "--calibration",
        metavar="FILE.py:FN",
        help="int8: FN() returns a list of input tuples to calibrate on (default: the factory's example inputs)",
    )
    p.set_defaults(func=cmd_export)
