"""Runtime assertions of the exported graph (``_assert_async``, ``_assert_scalar``, range constraints on
symbolic sizes, tensor-metadata asserts) removed: the runtime does not run them."""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

_ASSERTS = (
    torch.ops.aten._assert_async.msg,
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten._assert_tensor_metadata.default,
)


def _erase(graph_module: torch.fx.GraphModule, targets: tuple) -> None:
    for module in graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in list(module.graph.nodes):
            if node.op == "call_function" and node.target in targets:
                module.graph.erase_node(node)
        module.recompile()
        module.graph.eliminate_dead_code()


class RemoveGraphAssertsPass(PassBase):
    """Removes every assertion op, in every subgraph."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        _erase(graph_module, _ASSERTS)
        return PassResult(graph_module, True)


class RemoveNonCoreAtenOpGraphAssertsPass(PassBase):
    """Removes only the assertion ops outside the Core ATen set (``_assert_tensor_metadata``)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        _erase(graph_module, (torch.ops.aten._assert_tensor_metadata.default,))
        return PassResult(graph_module, True)
