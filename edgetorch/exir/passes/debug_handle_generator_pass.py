"""Debug handles for every node: ``DebugHandleGeneratorPass`` numbers a graph afresh,
``generate_missing_debug_handles`` only the nodes without one. May import torch.

Nodes made from the same node of the user's exported graph (their oldest ``from_node`` ancestor:
a ``linear`` decomposed into ``permute_copy`` + ``addmm``) share one handle; handles count up from 1
in graph order, top graph first, then subgraphs. Placeholders and outputs get none.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY, ancestor_identifier

__all__ = ["DebugHandleGeneratorPass", "assign_debug_handles", "generate_missing_debug_handles"]


def _numbered_nodes(graph_module: torch.fx.GraphModule) -> list[torch.fx.Node]:
    graphs = [m for m in graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
    return [n for m in graphs for n in m.graph.nodes if n.op not in ("placeholder", "output")]


def assign_debug_handles(graph_module: torch.fx.GraphModule) -> None:
    """Give each node without a debug handle one, after the largest present (nodes keep theirs)."""
    nodes = _numbered_nodes(graph_module)
    by_origin: dict[str, int] = {}
    for node in nodes:
        handle, origin = node.meta.get(DEBUG_HANDLE_KEY), ancestor_identifier(node)
        if handle is not None and origin is not None:
            by_origin.setdefault(origin, handle)
    last = max((n.meta.get(DEBUG_HANDLE_KEY) or 0 for n in nodes), default=0)
    for node in nodes:
        if node.meta.get(DEBUG_HANDLE_KEY) is not None:
            continue
        origin = ancestor_identifier(node)
        if origin is None or origin not in by_origin:
            last += 1
            if origin is not None:
                by_origin[origin] = last
        node.meta[DEBUG_HANDLE_KEY] = by_origin[origin] if origin is not None else last


class DebugHandleGeneratorPass(PassBase):
    """Number every node's debug handle afresh (existing handles are replaced)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for node in _numbered_nodes(graph_module):
            node.meta.pop(DEBUG_HANDLE_KEY, None)
        assign_debug_handles(graph_module)
        return PassResult(graph_module, True)


def generate_missing_debug_handles(ep: ExportedProgram) -> None:
    """Give the nodes of ``ep`` that have no debug handle one (for nodes a pass added)."""
    assign_debug_handles(ep.graph_module)
