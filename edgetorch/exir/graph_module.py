"""Walking graph modules with control flow: the subgraphs a ``cond``/``while_loop``/``map``/``scan`` calls.

Each finder looks at the top-level graph only and returns ``(attribute name, subgraph module,
calling node)`` per subgraph, in graph order. May import torch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

import torch

from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.dialects import to_aten

__all__ = [
    "_get_submodule",
    "bfs_trace_with_node_process",
    "contains_any_call_fn_target_op",
    "get_cond_while_submodules",
    "get_control_flow_submodules",
    "get_scan_submodules",
]

Found = list[tuple[str, torch.fx.GraphModule, torch.fx.Node]]
_hop = torch.ops.higher_order
# Which arguments of each control-flow operator are subgraphs.
_COND_WHILE = {_hop.cond: (1, 2), _hop.while_loop: (0, 1)}
_MAP_SCAN = {_hop.map_impl: (0,), _hop.scan: (0,)}


def _submodules(graph_module: torch.fx.GraphModule, where: dict[Any, tuple[int, ...]]) -> Found:
    found = []
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and node.target in where:
            for index in where[node.target]:
                attr = node.args[index]
                found.append((attr.target, graph_module.get_submodule(attr.target), node))
    return found


def _get_submodule(
    graph_module: torch.fx.GraphModule, node: torch.fx.Node, arg_index: int
) -> tuple[str, torch.nn.Module, torch.fx.Node]:
    """``(attribute name, module, node)`` for the module ``node`` passes as argument ``arg_index``.

    The argument must be a ``get_attr`` node naming a submodule of ``graph_module`` (a control-flow
    branch, a lowered module); anything else raises InvalidArgumentError.
    """
    attr = node.args[arg_index] if arg_index < len(node.args) else None
    if not isinstance(attr, torch.fx.Node) or attr.op != "get_attr" or not isinstance(attr.target, str):
        raise InvalidArgumentError(
            f"_get_submodule: expected argument {arg_index} of node {node.name!r} to be a get_attr node "
            f"naming a submodule, found {attr!r}; pass the index of a subgraph argument"
        )
    return attr.target, graph_module.get_submodule(attr.target), node


def get_control_flow_submodules(graph_module: torch.fx.GraphModule) -> Found:
    """The subgraphs of ``cond`` (both branches), ``map`` and ``scan`` calls."""
    return _submodules(graph_module, {_hop.cond: (1, 2), **_MAP_SCAN})


def get_cond_while_submodules(graph_module: torch.fx.GraphModule) -> Found:
    """The subgraphs of ``cond`` (both branches) and ``while_loop`` (condition and body) calls."""
    return _submodules(graph_module, _COND_WHILE)


def get_scan_submodules(graph_module: torch.fx.GraphModule) -> Found:
    """The combine functions of ``scan`` calls."""
    return _submodules(graph_module, {_hop.scan: (0,)})


def _all_graph_modules(graph_module: torch.fx.GraphModule) -> list[torch.fx.GraphModule]:
    """``graph_module`` and every control-flow subgraph under it, breadth first."""
    queue, seen = [graph_module], []
    while queue:
        current = queue.pop(0)
        seen.append(current)
        queue += [sub for _, sub, _ in _submodules(current, {**_COND_WHILE, **_MAP_SCAN})]
    return seen


def bfs_trace_with_node_process(gm: torch.fx.GraphModule, node_op: Callable[[torch.fx.Node], None]) -> None:
    """Call ``node_op`` on every node of ``gm`` and of its control-flow subgraphs, breadth first."""
    if not isinstance(gm, torch.fx.GraphModule):
        raise TypeError(f"expected a torch.fx.GraphModule, found {type(gm).__name__}")
    for module in _all_graph_modules(gm):
        for node in module.graph.nodes:
            node_op(node)


def contains_any_call_fn_target_op(graph_module: torch.fx.GraphModule, ops: Collection[Any]) -> bool:
    """Whether ``graph_module`` or one of its control-flow subgraphs calls one of ``ops`` (ATen or Edge)."""
    wanted = {to_aten(op) for op in ops}
    return any(
        node.op == "call_function" and to_aten(node.target) in wanted
        for module in _all_graph_modules(graph_module)
        for node in module.graph.nodes
    )
