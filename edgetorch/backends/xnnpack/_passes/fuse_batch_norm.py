"""``FuseBatchNormPass``: fold an inference batch norm into the convolution or linear layer before it.

``bn(conv(x, w, b))`` equals ``conv(x, w', b')`` with ``w' = w * γ/√(var+ε)`` per output channel and
``b' = (b - mean) * γ/√(var+ε) + β``; the fused weight and bias become new parameters of the program, the
batch norm goes away, and the old weights go when nothing else reads them. Imports torch.
"""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.fx.passes.infra.pass_base import PassResult

from edgetorch.backends.transforms.utils import (
    create_constant_placeholder,
    delete_constant_placeholder,
    get_param_tensor,
)
from edgetorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
from edgetorch.exir.dialects import to_aten

__all__ = ["FuseBatchNormPass", "fused_batch_norm_weights"]

_BATCH_NORMS = {
    # op: (index of eps, the op's arguments are (input, weight, bias, running_mean, running_var, ...))
    torch.ops.aten._native_batch_norm_legit_no_training.default: 6,
    torch.ops.aten.native_batch_norm.default: 7,
}


def fused_batch_norm_weights(
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    bn: tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor, torch.Tensor],
    eps: float,
    transposed: bool = False,
    groups: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (weight, bias) of a convolution or linear layer with the batch norm ``bn`` after it folded in.

    ``bn`` is (γ, β, running mean, running var), γ and β None when the norm has no affine part. A plain
    layer's output channels are its weight's dim 0; a transposed convolution's are dim 1 of
    ``[in, out/groups, k...]``, numbered group by group.
    """
    gamma, beta, mean, var = (None if t is None else t.to(torch.float32) for t in bn)
    weight = weight.to(torch.float32)
    scale = torch.rsqrt(var + eps) * (gamma if gamma is not None else 1.0)
    old_bias = bias.to(torch.float32) if bias is not None else torch.zeros_like(mean)
    new_bias = (old_bias - mean) * scale + (beta if beta is not None else 0.0)
    if transposed:
        cin, cout_g = weight.shape[:2]
        grouped = weight.reshape(groups, cin // groups, cout_g, *weight.shape[2:])
        shape = (groups, 1, cout_g) + (1,) * (weight.dim() - 2)
        return (grouped * scale.reshape(shape)).reshape(weight.shape), new_bias
    return weight * scale.reshape((-1,) + (1,) * (weight.dim() - 1)), new_bias


def _batch_norm_after(node: torch.fx.Node) -> torch.fx.Node | None:
    """The batch norm that is the only reader of ``node``, read only for its output; else None."""
    if len(node.users) != 1:
        return None
    bn = next(iter(node.users))
    if bn.op != "call_function" or to_aten(bn.target) not in _BATCH_NORMS:
        return None
    if to_aten(bn.target) == torch.ops.aten.native_batch_norm.default and bn.args[5]:
        return None  # training mode: the batch statistics are not constants
    if not all(u.target is operator.getitem and u.args[1] == 0 for u in bn.users):
        return None
    return bn


class FuseBatchNormPass(XNNPACKPass):
    """Fuses ``convolution → batch_norm`` (1-D and 2-D, plain or transposed) and ``linear → batch_norm``."""

    @staticmethod
    def can_fuse(input_node: torch.fx.Node, bn: torch.fx.Node, program: ExportedProgram) -> bool:
        """Whether ``bn`` can be folded into ``input_node``: its only reader, with constant weights on both."""
        if input_node.op != "call_function" or _batch_norm_after(input_node) is not bn:
            return False
        target = to_aten(input_node.target)
        if target not in (torch.ops.aten.convolution.default, torch.ops.aten.linear.default):
            return False
        if target == torch.ops.aten.convolution.default:
            val = input_node.args[0].meta.get("val") if isinstance(input_node.args[0], torch.fx.Node) else None
            if val is None or val.dim() not in (3, 4):
                return False
        bias = input_node.args[2] if len(input_node.args) > 2 else None
        bn_weight, bn_bias, mean, var = bn.args[1:5]
        required = (input_node.args[1], mean, var)
        optional = (bias, bn_weight, bn_bias)
        return all(get_param_tensor(program, a) is not None for a in required) and all(
            a is None or get_param_tensor(program, a) is not None for a in optional
        )

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        program = self.exported_program
        graph = graph_module.graph
        replaced: set[torch.fx.Node] = set()
        for node in list(graph.nodes):
            bn = _batch_norm_after(node) if node.op == "call_function" else None
            if bn is None or not self.can_fuse(node, bn, program):
                continue
            replaced.update(a for a in (*node.args[1:3], *bn.args[1:5]) if isinstance(a, torch.fx.Node))
            self._fuse(graph, node, bn)
        if not replaced:
            return PassResult(graph_module, False)
        graph.eliminate_dead_code()
        for placeholder in replaced:
            if not placeholder.users:
                delete_constant_placeholder(program, placeholder)
        graph_module.recompile()
        return PassResult(graph_module, True)

    def _fuse(self, graph: torch.fx.Graph, node: torch.fx.Node, bn: torch.fx.Node) -> None:
        program = self.exported_program

        def tensor(arg: object) -> torch.Tensor | None:
            return None if arg is None else get_param_tensor(program, arg)

        weight = tensor(node.args[1])
        assert weight is not None  # can_fuse checked it
        bias = tensor(node.args[2]) if len(node.args) > 2 else None
        gamma, beta, mean, var = (tensor(a) for a in bn.args[1:5])
        assert mean is not None and var is not None  # can_fuse checked them
        eps = float(bn.args[_BATCH_NORMS[to_aten(bn.target)]])
        conv = to_aten(node.target) == torch.ops.aten.convolution.default
        transposed, groups = (bool(node.args[6]), int(node.args[8])) if conv else (False, 1)
        with torch.no_grad():
            fused_w, fused_b = fused_batch_norm_weights(
                weight.detach(),
                None if bias is None else bias.detach(),
                (gamma, beta, mean, var),
                eps,
                transposed,
                groups,
            )
        base = node.args[1].name
        w_node = create_constant_placeholder(program, graph, f"{base}_fused_bn", InputKind.PARAMETER, fused_w)
        b_node = create_constant_placeholder(program, graph, f"{base}_fused_bn_bias", InputKind.PARAMETER, fused_b)
        args = list(node.args)
        if len(args) < 3:
            args.append(None)
        args[1], args[2] = w_node, b_node
        node.args = tuple(args)
        for user in list(bn.users):
            user.replace_all_uses_with(node)
            graph.erase_node(user)
        graph.erase_node(bn)
