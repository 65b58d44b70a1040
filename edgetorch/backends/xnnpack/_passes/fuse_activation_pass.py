"""``FuseActivationPass``: a ReLU or hardtanh becomes the output clamp of the node before it.

XNNPACK's convolution, fully-connected and element-wise add/sub/mul nodes clamp their own output
(``XNode.output_min_max``), so an activation read from one of them costs nothing when folded in. The
pass records the clamp in the producer's ``meta[FUSED_ACTIVATION_TAG]`` as an ``OutputMinMax`` and
removes the activation; the serializer (``backends.xnnpack.serialize``) writes the clamp on the
producer's XNNPACK node. A producer read by anything else keeps its activation. Imports torch.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassResult

from edgetorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
from edgetorch.backends.xnnpack.operators.elementwise import clamp_bounds
from edgetorch.backends.xnnpack.schema import OutputMinMax
from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.dialects import to_aten

__all__ = ["FuseActivationPass"]

aten = torch.ops.aten
FUSED_ACTIVATION_TAG = "XNN_FUSED_ACTIVATION"


class FuseActivationPass(XNNPACKPass):
    """Folds each ReLU / hardtanh into the convolution, linear, add, sub or mul it alone reads."""

    FUSED_ACTIVATION_TAG = FUSED_ACTIVATION_TAG
    FUSEABLE_OPS = (aten.convolution.default, aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.linear.default)
    FUSEABLE_ACTIVATIONS = (aten.relu.default, aten.hardtanh.default)

    @staticmethod
    def get_fused_activation(node: torch.fx.Node) -> OutputMinMax | None:
        """The clamp folded into ``node``, or None."""
        return node.meta.get(FuseActivationPass.FUSED_ACTIVATION_TAG)

    def get_output_min_max_from_activation(self, activation_node: torch.fx.Node) -> OutputMinMax:
        """The (min, max) ``activation_node`` limits its input to, as the producer's output clamp."""
        if _op(activation_node) not in self.FUSEABLE_ACTIVATIONS:
            raise InvalidArgumentError(
                f"FuseActivationPass folds {[str(a) for a in self.FUSEABLE_ACTIVATIONS]}; found "
                f"{activation_node.format_node()}; leave other activations in the graph"
            )
        return OutputMinMax(*clamp_bounds(activation_node))

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        modified = False
        for activation in list(graph_module.graph.nodes):
            if activation.op != "call_function" or _op(activation) not in self.FUSEABLE_ACTIVATIONS:
                continue
            producer = activation.args[0]
            fuseable = isinstance(producer, torch.fx.Node) and producer.op == "call_function"
            if not fuseable or _op(producer) not in self.FUSEABLE_OPS or len(producer.users) != 1:
                continue
            if self.get_fused_activation(producer) is not None:
                continue  # a second clamp would need the intersection; XNNPACK keeps the node instead
            producer.meta[self.FUSED_ACTIVATION_TAG] = self.get_output_min_max_from_activation(activation)
            activation.replace_all_uses_with(producer)
            graph_module.graph.erase_node(activation)
            modified = True
        if modified:
            graph_module.recompile()
        return PassResult(graph_module, modified)


def _op(node: torch.fx.Node) -> object:
    return to_aten(node.target) if node.op == "call_function" else None
