"""Lowered modules inside a graph, at ExecuTorch's path: finding them, and cutting nodes out into a submodule.

``LoweredBackendModule`` itself lives in :mod:`edgetorch.exir.backend.lowered_backend_module`.
May import torch.
"""

from __future__ import annotations

import operator

import torch
from torch.export.graph_signature import OutputKind, OutputSpec
from torch.fx.passes.utils.fuser_utils import erase_nodes, fuse_as_graphmodule, insert_subgm, legalize_graph, topo_sort

from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.backend.delegate import is_delegate_call
from edgetorch.exir.backend.lowered_backend_module import LoweredBackendModule, user_inputs, user_outputs

__all__ = [
    "LoweredBackendModule",
    "arrange_graph_outputs",
    "create_submodule_from_nodes",
    "get_lowered_backend_modules",
    "get_lowered_submodules",
    "user_inputs",
    "user_outputs",
]


def get_lowered_submodules(
    graph_module: torch.fx.GraphModule,
) -> list[tuple[str, LoweredBackendModule, torch.fx.Node]]:
    """(attribute name, lowered module, calling node) for each delegate call of the top-level graph, in order."""
    found = []
    for node in graph_module.graph.nodes:
        if is_delegate_call(node):
            name = node.args[0].target
            found.append((name, getattr(graph_module, name), node))
    return found


def get_lowered_backend_modules(graph_module: torch.fx.GraphModule) -> list[LoweredBackendModule]:
    """The lowered modules the top-level graph calls, in call order."""
    return [module for _, module, _ in get_lowered_submodules(graph_module)]


def create_submodule_from_nodes(
    gm: torch.fx.GraphModule, node_list: list[torch.fx.Node], tag: str, skip_legalize_graph: bool = False
) -> tuple[torch.fx.GraphModule, torch.fx.Node]:
    """Move ``node_list`` (one connected group) into a submodule ``fused_<tag>`` of ``gm``, in place.

    Returns the submodule and the ``call_module`` node that now stands for the nodes. A single
    tensor result is read through ``getitem(call, 0)``, as multi-output results are. Raises
    ValueError when the nodes cannot be moved as one piece (a path leaves the group and comes back).
    """
    name = f"fused_{tag}"
    ordered = topo_sort(list(node_list))
    sub_gm, inputs, outputs = fuse_as_graphmodule(gm, ordered, name, always_return_tuple=True)
    insert_subgm(gm, sub_gm, inputs, outputs)
    call = next((n for n in gm.graph.nodes if n.op == "call_module" and n.target == name), None)
    if call is None:
        raise ValueError(f"nodes {[n.name for n in node_list]} do not form one self-contained subgraph of the graph")
    erase_nodes(gm, ordered)
    if not skip_legalize_graph:
        legalize_graph(gm)
    gm.recompile()
    return sub_gm, call


_MUTATION_KINDS = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)


def arrange_graph_outputs(
    gm: torch.fx.GraphModule, output_specs: list[OutputSpec], call_module_node: torch.fx.Node
) -> torch.fx.GraphModule:
    """Put the mutation outputs of ``gm`` before its user outputs, in place, keeping each group's order.

    An exported program's verifier reads the first outputs as the mutations, so a cut-out submodule
    whose outputs interleave the two kinds is reordered: its output tuple, ``output_specs`` (same
    length, one per output) and the ``getitem`` indices the parent reads from ``call_module_node``.
    Returns ``gm``. Raises InvalidArgumentError when ``output_specs`` does not describe every output.
    """
    output = next((node for node in gm.graph.nodes if node.op == "output"), None)
    if output is None or not output.args[0]:
        return gm
    results = list(output.args[0])
    if len(results) != len(output_specs):
        raise InvalidArgumentError(
            f"arrange_graph_outputs: expected one output spec per graph output ({len(results)}), "
            f"found {len(output_specs)}; build the specs from this graph's output node"
        )
    mutations = [i for i, spec in enumerate(output_specs) if spec.kind in _MUTATION_KINDS]
    order = mutations + [i for i, spec in enumerate(output_specs) if spec.kind not in _MUTATION_KINDS]
    if order == list(range(len(results))):
        return gm
    output.args = (tuple(results[i] for i in order),)
    output_specs[:] = [output_specs[i] for i in order]
    new_index = {old: new for new, old in enumerate(order)}
    for user in list(call_module_node.users):
        if user.op == "call_function" and user.target is operator.getitem:
            old = user.args[1]
            if isinstance(old, int) and old in new_index:
                user.args = (user.args[0], new_index[old])
    gm.graph.lint()
    return gm
