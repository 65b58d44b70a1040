"""Edge targets made backend targets: Python arithmetic on symbolic sizes becomes the ``executorch_prim``
scalar ops the runtime runs, and an op that the backend dialect also declares (``exir_ops.backend.<ns>``,
a namespace ExecuTorch or ``bind_pattern_to_op`` registered) becomes its ``BackendOpOverload``."""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.dialects._ops import BACKEND_NAMESPACES, backend_op
from edgetorch.exir.passes.out_variant import SYM_OPS


def _as_backend(target: torch._ops.OpOverload) -> Any:
    if target.namespace not in BACKEND_NAMESPACES:
        return target
    try:
        return backend_op(target)
    except RuntimeError:  # no kernel that makes it a backend op: stays as it is
        return target


class EdgeToBackendOpsPass(PassBase):
    """Rewrites symbolic-size arithmetic to ``executorch_prim`` ops and backend-namespace ops to backend ops."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if node.op != "call_function":
                    continue
                if node.target in SYM_OPS:
                    node.target = SYM_OPS[node.target]
                elif isinstance(node.target, torch._ops.OpOverload):
                    node.target = _as_backend(node.target)
            module.recompile()
        return PassResult(graph_module, True)
