"""Runtime assertions of the exported graph (``_assert_async``, ``_assert_scalar``, range constraints on
symbolic sizes, tensor-metadata asserts) removed: the runtime does not run them. ``ASSERT_OPS`` is the one
list of them (the out-variant pass drops the same ops); ``erase_calls`` removes calls of given ops from a graph
and its subgraphs. May import torch only."""

from __future__ import annotations

from collections.abc import Collection

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

ASSERT_OPS = frozenset(
    {
        torch.ops.aten._assert_async.msg,
        torch.ops.aten._assert_scalar.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
        torch.ops.aten.sym_constrain_range.default,
        torch.ops.aten._assert_tensor_metadata.default,
    }
)


def erase_calls(graph_module: torch.fx.GraphModule, targets: Collection, prune: bool = True) -> None:
    """Remove every call of ``targets`` from ``graph_module`` and its subgraphs; with ``prune``, also the
    values only they read."""
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in list(module.graph.nodes):
            if node.op == "call_function" and node.target in targets:
                module.graph.erase_node(node)
        if prune:
            module.graph.eliminate_dead_code()
        module.recompile()


class RemoveGraphAssertsPass(PassBase):
    """Removes every assertion op, in every subgraph."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        erase_calls(graph_module, ASSERT_OPS)
        return PassResult(graph_module, True)


class RemoveNonCoreAtenOpGraphAssertsPass(PassBase):
    """Removes only the assertion ops outside the Core ATen set (``_assert_tensor_metadata``)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        erase_calls(graph_module, (torch.ops.aten._assert_tensor_metadata.default,))
        return PassResult(graph_module, True)
