"""Helpers for passes that add or remove a program's constant inputs (parameters, buffers, lifted constants):
each keeps the graph's placeholders, the graph signature and the state dict / constants table in step.
The program is updated in place, as a pass that holds it (``XNNPACKPass``) expects. Imports torch.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

__all__ = ["create_constant_placeholder", "delete_constant_placeholder", "get_param_tensor", "is_param_node"]

_STATE_DICT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER)
_CONSTANT_KINDS = (*_STATE_DICT_KINDS, InputKind.CONSTANT_TENSOR)


def _input_spec(program: ExportedProgram, node: torch.fx.Node) -> InputSpec | None:
    if node.op != "placeholder":
        return None
    for spec in program.graph_signature.input_specs:
        if isinstance(spec.arg, TensorArgument) and spec.arg.name == node.name:
            return spec
    return None


def is_param_node(program: ExportedProgram, node: object) -> bool:
    """Whether ``node`` is a placeholder for a parameter, buffer or lifted constant tensor of ``program``."""
    if not isinstance(node, torch.fx.Node):
        return False
    spec = _input_spec(program, node)
    return spec is not None and spec.kind in _CONSTANT_KINDS


def get_param_tensor(program: ExportedProgram, node: object) -> torch.Tensor | None:
    """The tensor a constant placeholder of ``program`` stands for, or None for any other node."""
    if not isinstance(node, torch.fx.Node):
        return None
    spec = _input_spec(program, node)
    if spec is None or spec.kind not in _CONSTANT_KINDS or spec.target is None:
        return None
    if spec.kind in _STATE_DICT_KINDS and spec.target in program.state_dict:
        return program.state_dict[spec.target]
    return program.constants.get(spec.target)


def _unused_name(program: ExportedProgram, graph: torch.fx.Graph, name: str) -> str:
    taken = {n.name for n in graph.nodes} | set(program.state_dict) | set(program.constants)
    candidate, i = name, 0
    while candidate in taken:
        i += 1
        candidate = f"{name}_{i}"
    return candidate


def create_constant_placeholder(
    exp_program: ExportedProgram,
    graph: torch.fx.Graph,
    name: str,
    kind: InputKind,
    data: torch.Tensor,
    persistent_buffer: bool | None = None,
) -> torch.fx.Node:
    """A new placeholder for ``data`` as a ``kind`` input of ``exp_program``, placed with the other constants.

    ``name`` is made unique; the placeholder goes before the first user input, its ``InputSpec`` at the
    matching position, and ``data`` into the state dict (parameters, persistent buffers) or the constants table.
    """
    if kind not in _CONSTANT_KINDS:
        raise ValueError(f"a constant placeholder is a parameter, buffer or constant tensor; found kind {kind}")
    if kind == InputKind.BUFFER and persistent_buffer is None:
        raise ValueError("a buffer placeholder needs persistent_buffer=True or False")
    name = _unused_name(exp_program, graph, name)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = exp_program.graph_signature.input_specs
    position = next((i for i, s in enumerate(specs) if s.kind == InputKind.USER_INPUT), len(specs))
    anchor = placeholders[position] if position < len(placeholders) else next(iter(graph.nodes), None)
    if anchor is None or anchor.op != "placeholder" and position < len(placeholders):
        raise ValueError("the graph's placeholders and the program's signature disagree; run the pass on the program")
    insert = graph.inserting_before(anchor) if position < len(placeholders) else graph.inserting_after(placeholders[-1])
    with insert:
        node = graph.placeholder(name)
    fake_mode = next((p.meta["val"].fake_mode for p in placeholders if hasattr(p.meta.get("val"), "fake_mode")), None)
    node.meta["val"] = fake_mode.from_tensor(data, static_shapes=True) if fake_mode is not None else data
    persistent = persistent_buffer if kind == InputKind.BUFFER else None
    specs.insert(position, InputSpec(kind, TensorArgument(name), name, persistent=persistent))
    if kind == InputKind.PARAMETER:
        exp_program.state_dict[name] = torch.nn.Parameter(data, requires_grad=False)
    elif kind == InputKind.BUFFER and persistent_buffer:
        exp_program.state_dict[name] = data
    else:
        exp_program.constants[name] = data
    return node


def delete_constant_placeholder(exp_program: ExportedProgram, node: torch.fx.Node) -> None:
    """Remove an unused constant placeholder, its ``InputSpec`` and its tensor from ``exp_program``."""
    if node.users:
        raise ValueError(f"placeholder {node.name} still has users {list(node.users)}; delete it once nothing reads it")
    spec = _input_spec(exp_program, node)
    if spec is None or spec.kind not in _CONSTANT_KINDS:
        raise ValueError(f"{node.name} is not a constant placeholder of the program (found spec {spec})")
    exp_program.graph_signature.input_specs.remove(spec)
    if spec.target is not None:
        exp_program.state_dict.pop(spec.target, None)
        exp_program.constants.pop(spec.target, None)
    node.graph.erase_node(node)
