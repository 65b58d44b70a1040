"""Lift tensor constants held as ``get_attr`` attributes into program inputs.

Passes that create constants (scalar -> tensor conversion, user passes calling
``torch.tensor``) leave them as attributes of the graph module. An
ExportedProgram keeps tensor data out of the graph: each becomes a placeholder
listed as a ``CONSTANT_TENSOR`` input, with its value in ``program.constants``.
May import torch only.
"""

from __future__ import annotations

import torch
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument


def _unique_name(taken: set[str]) -> str:
    i = 0
    while f"_lifted_tensor_constant{i}" in taken:
        i += 1
    return f"_lifted_tensor_constant{i}"


def lift_constants(
    graph_module: torch.fx.GraphModule, input_specs: list[InputSpec], constants: dict[str, object]
) -> tuple[list[InputSpec], dict[str, object]]:
    """Turn tensor ``get_attr`` nodes of the top-level graph into constant inputs.

    Returns the new input specs (one per placeholder, in order) and constants;
    ``graph_module`` is edited in place.
    """
    graph = graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    specs = list(input_specs)
    insert_at = next((i for i, s in enumerate(specs) if s.kind == InputKind.USER_INPUT), len(specs))
    # Placeholders follow the specs' order, but names can differ (a pass may rename ``input`` to ``input_1``);
    # the caller re-points the specs at the placeholders afterwards.
    first_user = placeholders[insert_at] if insert_at < len(placeholders) else None
    anchor = first_user or next(n for n in graph.nodes if n.op != "placeholder")
    constants = dict(constants)
    taken = {n.name for n in graph.nodes} | set(constants)
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value = getattr(graph_module, node.target)
        if not isinstance(value, torch.Tensor):
            continue
        name = _unique_name(taken)
        taken.add(name)
        with graph.inserting_before(anchor):
            placeholder = graph.placeholder(name)
        placeholder.meta.update(node.meta)
        node.replace_all_uses_with(placeholder)
        graph.erase_node(node)
        delattr(graph_module, node.target)
        constants[name] = value
        specs.insert(
            insert_at, InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(name=placeholder.name), target=name)
        )
        insert_at += 1
    graph_module.recompile()
    return specs, constants
