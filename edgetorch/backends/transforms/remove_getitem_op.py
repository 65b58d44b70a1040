"""``RemoveGetItemPass``: replace an op that returns (values, indices) and whose indices nobody reads by the
op that returns the values alone, so a backend without a tuple-returning variant can take it.

``max_pool2d_with_indices(...)[0]`` becomes ``max_pool2d(...)`` and ``max.dim(x, d, keepdim)[0]`` becomes
``amax(x, [d], keepdim)``. An op whose indices are read (a ``getitem`` with index 1) stays. Imports torch.
"""

from __future__ import annotations

import operator

import torch
from torch.fx.passes.infra.pass_base import PassResult

from edgetorch.exir.dialects import exir_ops, to_aten
from edgetorch.exir.pass_base import ExportPass

__all__ = ["RemoveGetItemPass"]


def _values_only(node: torch.fx.Node) -> tuple[object, tuple[object, ...]] | None:
    """The values-only op and its arguments for ``node``, or None when it has no such replacement."""
    target = to_aten(node.target)
    edge = node.target is not target
    if target == torch.ops.aten.max_pool2d_with_indices.default:
        op = exir_ops.edge.aten.max_pool2d.default if edge else torch.ops.aten.max_pool2d.default
        return op, tuple(node.args)
    if target == torch.ops.aten.max.dim:
        op = exir_ops.edge.aten.amax.default if edge else torch.ops.aten.amax.default
        dim = node.args[1]
        keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
        return op, (node.args[0], [dim], keepdim)
    return None


class RemoveGetItemPass(ExportPass):
    """Rewrites (values, indices) ops read only through ``getitem(op, 0)`` into their values-only op."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        modified = False
        for node in list(graph_module.graph.nodes):
            if node.op != "call_function":
                continue
            replacement = _values_only(node)
            users = list(node.users)
            if replacement is None or not users:
                continue
            if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
                continue
            op, args = replacement
            with graph_module.graph.inserting_before(node):
                values = graph_module.graph.call_function(op, args)
            values.meta = dict(node.meta)
            if "val" in node.meta:
                values.meta["val"] = node.meta["val"][0]
            for user in users:
                user.replace_all_uses_with(values)
                graph_module.graph.erase_node(user)
            graph_module.graph.erase_node(node)
            modified = True
        if modified:
            graph_module.graph.eliminate_dead_code()
            graph_module.recompile()
        return PassResult(graph_module, modified)
