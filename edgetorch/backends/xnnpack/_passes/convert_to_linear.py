"""``ConvertToLinearPass``: fold the decomposed form of a linear layer back into one ``linear``.

Export decomposes ``nn.Linear`` / ``F.linear`` into ``addmm(bias, x, permute_copy(w, [1, 0]))`` (or ``mm``
without a bias); XNNPACK's fully-connected node takes the untransposed weight, so the pass rebuilds
``linear(x, w, bias)``. A linear on an input of more than two dimensions is exported between a view that
flattens the input to 2-D and one that restores the leading dimensions; the rebuilt linear reads and writes
the unflattened tensors and both views go. Only matmuls that export recorded as coming from a linear and whose second operand
is a transpose of a 2-D weight are rewritten; the transpose is dropped when nothing else reads it. Imports torch.
"""

from __future__ import annotations

import torch
from torch.fx.passes.infra.pass_base import PassResult

from edgetorch.exir.dialects import exir_ops, to_aten
from edgetorch.exir.pass_base import ExportPass

__all__ = ["ConvertToLinearPass"]

_TRANSPOSES = (torch.ops.aten.permute_copy.default, torch.ops.aten.t_copy.default, torch.ops.aten.permute.default)
_VIEWS = (torch.ops.aten.view_copy.default, torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)
_LINEAR_SOURCES = (torch.nn.Linear, torch.nn.functional.linear, "linear")


def _from_linear(node: torch.fx.Node) -> bool:
    """Whether export recorded ``node`` as part of a linear layer (``source_fn_stack``, or ``torch_fn`` as
    newer torch records it); a matmul written as such stays a matmul."""
    stack = node.meta.get("source_fn_stack")
    if stack:
        source = stack[-1][1]
        return source in _LINEAR_SOURCES or getattr(source, "__name__", None) == "linear"
    torch_fn = node.meta.get("torch_fn")
    return bool(torch_fn) and str(torch_fn[1]).rsplit(".", 1)[-1] == "linear"


def _untransposed_weight(node: object) -> torch.fx.Node | None:
    """The 2-D weight ``node`` transposes, or None when ``node`` is not such a transpose."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or to_aten(node.target) not in _TRANSPOSES:
        return None
    if to_aten(node.target) != torch.ops.aten.t_copy.default and list(node.args[1]) not in ([1, 0], [-1, -2]):
        return None
    weight = node.args[0]
    val = weight.meta.get("val") if isinstance(weight, torch.fx.Node) else None
    return weight if val is not None and val.dim() == 2 else None


def _view_of(node: object) -> torch.fx.Node | None:
    """The tensor ``node`` views, if ``node`` is a view_copy / view made by the same linear layer."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function" or not _from_linear(node):
        return None
    if to_aten(node.target) not in _VIEWS or not isinstance(node.args[0], torch.fx.Node):
        return None
    return node.args[0]


def _absorb_flattening_views(graph: torch.fx.Graph, linear: torch.fx.Node) -> None:
    """Drop the view that flattened ``linear``'s input to 2-D and the one that restored its output's leading
    dimensions, when the restored leading dimensions are the input's."""
    source = _view_of(linear.args[0])
    users = list(linear.users)
    if source is None or len(users) != 1 or _view_of(users[0]) is not linear:
        return
    unflatten = users[0]
    shape_in, shape_out = source.meta["val"].shape, unflatten.meta["val"].shape
    if len(shape_in) < 3 or len(shape_in) != len(shape_out) or shape_in[:-1] != shape_out[:-1]:
        return
    flatten = linear.args[0]
    linear.args = (source, *linear.args[1:])
    linear.meta["val"] = unflatten.meta["val"]
    unflatten.replace_all_uses_with(linear)
    graph.erase_node(unflatten)
    if not flatten.users:
        graph.erase_node(flatten)


class ConvertToLinearPass(ExportPass):
    """Rewrites ``addmm(b, x, wᵀ)`` and ``mm(x, wᵀ)`` that came from a linear layer into ``linear(x, w, b)``."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        graph = graph_module.graph
        modified = False
        for node in list(graph.nodes):
            if node.op != "call_function" or not _from_linear(node):
                continue
            target = to_aten(node.target)
            if target == torch.ops.aten.addmm.default and not node.kwargs:
                bias, x, transposed = node.args
            elif target == torch.ops.aten.mm.default:
                (x, transposed), bias = node.args, None
            else:
                continue
            weight = _untransposed_weight(transposed)
            if weight is None or (bias is not None and bias.meta["val"].dim() != 1):
                continue
            op = exir_ops.edge.aten.linear.default if node.target is not target else torch.ops.aten.linear.default
            with graph.inserting_before(node):
                linear = graph.call_function(op, (x, weight, bias) if bias is not None else (x, weight))
            linear.meta = dict(node.meta)
            node.replace_all_uses_with(linear)
            graph.erase_node(node)
            if not transposed.users:
                graph.erase_node(transposed)
            _absorb_flattening_views(graph, linear)
            modified = True
        if modified:
            graph_module.recompile()
        return PassResult(graph_module, modified)
