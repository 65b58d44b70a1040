"""Finding an operator's out variant: the overload taking the same arguments plus ``out`` tensors. May import torch."""

from __future__ import annotations

from typing import Any

import torch
from torchgen.model import FunctionSchema, SchemaKind

from edgetorch.exir.dialects import quantized

__all__ = ["find_out_variant", "parse_schema"]


def find_out_variant(op: torch._ops.OpOverload) -> tuple[Any, tuple[str, ...]]:
    """The overload whose schema is ``op``'s functional schema plus out arguments, and those arguments' names.

    torch's own overloads come first; ExecuTorch's quantized kernel library's out variants, which torch
    knows only when that library is loaded, come from :mod:`edgetorch.exir.dialects.quantized` otherwise.
    (None, ()) when there is none. Not cached: an out overload may be defined after a first miss.
    """
    functional = parse_schema(op)
    if functional is None:
        return None, ()
    signature = functional.signature(strip_default=True)  # bernoulli.p: p has no default; float_out: 0.5
    packets = [op.overloadpacket]
    if functional.name.name.functional_overload:  # normal_functional's out form is normal.out
        packets.append(getattr(getattr(torch.ops, op.namespace), str(functional.name.name.base), None))
    for packet in filter(None, packets):
        for name in packet.overloads():
            candidate = getattr(packet, name)
            schema = parse_schema(candidate)
            if (
                schema is not None
                and schema.kind() == SchemaKind.out
                and schema.signature(strip_default=True) == signature
                and len(schema.arguments.out) == len(functional.returns)
            ):
                return candidate, tuple(a.name for a in schema.arguments.out)
    return quantized.out_variant(op)


def parse_schema(op: torch._ops.OpOverload) -> FunctionSchema | None:
    """``op``'s schema as torchgen reads it, or None for schemas torchgen cannot read (e.g. generic list ops)."""
    try:
        return FunctionSchema.parse(str(op._schema))
    except (AssertionError, RuntimeError, KeyError):
        return None
