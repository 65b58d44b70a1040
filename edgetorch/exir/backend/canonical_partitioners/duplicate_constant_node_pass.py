"""``duplicate_constant_node``: give each user of a weight its own copy, so partitions need not share it.

A partition owns the constants only it reads (``tag_constant_data``); a small constant read by
several partitions would otherwise be handed to each at run time. Use it for light data: each copy
is stored. May import torch.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

__all__ = ["duplicate_constant_node"]


def duplicate_constant_node(exported_program: ExportedProgram, candidate_node: str) -> set[str]:
    """Copy the constant placeholder named ``candidate_node`` once per user after the first, in place.

    Each copy is a new placeholder ``<name>_copy_<i>`` of the same kind (parameter, buffer or
    constant) whose data is a copy of the original's; returns the copies' names (empty when there is
    no such placeholder). ValueError for a placeholder that is a user input.
    """
    program = exported_program
    node = next((n for n in program.graph.nodes if n.op == "placeholder" and n.name == candidate_node), None)
    if node is None:
        return set()
    specs = list(program.graph_signature.input_specs)
    index = next(i for i, s in enumerate(specs) if s.arg.name == candidate_node)
    spec = specs[index]
    if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
        raise ValueError(f"{candidate_node} is a {spec.kind.name} placeholder; only weights and constants are copied")
    in_constants = spec.kind == InputKind.CONSTANT_TENSOR or (spec.kind == InputKind.BUFFER and not spec.persistent)
    store = program.constants if in_constants else program.state_dict
    data = store[spec.target]
    copies = []
    for i, user in enumerate(list(node.users)[1:]):
        name = f"{candidate_node}_copy_{i}"
        with program.graph.inserting_before(node):
            copy = program.graph.placeholder(name)
        copy.meta = dict(node.meta)
        user.replace_input_with(node, copy)
        clone = data.detach().clone()
        store[copy.name] = torch.nn.Parameter(clone, data.requires_grad) if spec.kind == InputKind.PARAMETER else clone
        copies.append(InputSpec(spec.kind, TensorArgument(copy.name), copy.name, spec.persistent))
    program.graph_signature.input_specs = specs[:index] + copies + specs[index:]
    program.graph_module.recompile()
    program._validate()
    return {s.arg.name for s in copies}
