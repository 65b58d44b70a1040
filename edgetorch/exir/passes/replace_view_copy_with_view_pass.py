"""ReplaceViewCopyWithViewPass: static reshapes of computed tensors become ``memory.view`` aliases.

May import torch.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir import memory
from edgetorch.exir.dialects import to_aten
from edgetorch.exir.passes.spec_prop import is_inplace
from edgetorch.exir.tensor import TensorSpec

VIEW_OPS = {torch.ops.aten.view.default, torch.ops.aten.view_copy.default, torch.ops.aten._unsafe_view.default}


class ReplaceViewCopyWithViewPass(PassBase):
    """Turn static reshapes of computed tensors into ``memory.view``: an alias, not a kernel call.

    Only views of call results (not of inputs, buffers or constants) with
    static shapes qualify, so the alias always lives in planned memory.
    """

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and to_aten(node.target) in VIEW_OPS and _viewable(node):
                base = node.args[0].meta["spec"]
                node.target = memory.view
                spec = node.meta["spec"]
                spec.storage_base = base.storage_base or base
                spec.storage_base_offset = base.storage_base_offset if base.storage_base else 0
        graph_module.recompile()
        return PassResult(graph_module, True)


def _viewable(node: torch.fx.Node) -> bool:
    base, spec = node.args[0], node.meta.get("spec")
    base_spec = base.meta.get("spec")
    return (
        base.op == "call_function"
        and not is_inplace(base.target)
        and isinstance(spec, TensorSpec)
        and isinstance(base_spec, TensorSpec)
        and not (spec.dynamic or base_spec.dynamic)
        and base_spec.dim_order == tuple(range(len(base_spec.dim_order)))
    )
