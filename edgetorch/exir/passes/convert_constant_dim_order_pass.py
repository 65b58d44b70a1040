"""Constants and persistent buffers in a dim order the runtime can describe.

A tensor file entry carries a dim order, which can say "contiguous" or "channels last" but not an arbitrary
stride pattern (a transposed or sliced view kept as a constant). This pass makes every lifted constant and
persistent buffer that is neither contiguous nor channels-last a contiguous copy, and gives its placeholder a
matching fake value, in place on the exported program.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind


def _needs_copy(value: object) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and not value.is_contiguous()
        and not value.is_contiguous(memory_format=torch.channels_last)
    )


def _refresh_placeholder(ep: ExportedProgram, target: str, kind: InputKind) -> None:
    spec = next((s for s in ep.graph_signature.input_specs if s.kind == kind and s.target == target), None)
    if spec is None:
        raise RuntimeError(f"convert_constant_dim_order_pass: no input spec lifts {kind.name} {target!r}")
    name = getattr(spec.arg, "name", None)
    node = next((n for n in ep.graph.nodes if n.op == "placeholder" and n.name == name), None)
    if node is None:
        raise RuntimeError(f"convert_constant_dim_order_pass: no placeholder {name!r} for {target!r}")
    node.meta["val"] = node.meta["val"].contiguous()


def convert_constant_dim_order_pass(exported_program: ExportedProgram) -> ExportedProgram:
    """Make each constant tensor and persistent buffer of ``exported_program`` contiguous unless it already is,
    or is channels-last; returns the same program, changed in place."""
    for key, value in list(exported_program.constants.items()):
        if _needs_copy(value):
            exported_program.constants[key] = value.contiguous()
            _refresh_placeholder(exported_program, key, InputKind.CONSTANT_TENSOR)
    transient = set(exported_program.graph_signature.non_persistent_buffers)
    for key, value in list(exported_program.named_buffers()):
        if key not in transient and _needs_copy(value):
            exported_program.state_dict[key] = value.contiguous()
            _refresh_placeholder(exported_program, key, InputKind.BUFFER)
    return exported_program
