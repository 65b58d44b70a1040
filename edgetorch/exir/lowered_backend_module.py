"""Lowered modules inside a graph, at ExecuTorch's path: finding them, and cutting nodes out into a submodule.

``LoweredBackendModule`` itself lives in :mod:`edgetorch.exir.backend.lowered_backend_module`.
May import torch.
"""

from __future__ import annotations

import torch
from torch.fx.passes.utils.fuser_utils import erase_nodes, fuse_as_graphmodule, insert_subgm, legalize_graph, topo_sort

from edgetorch.exir.backend.delegate import is_delegate_call
from edgetorch.exir.backend.lowered_backend_module import LoweredBackendModule, user_inputs, user_outputs

__all__ = [
    "LoweredBackendModule",
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
