"""Spec propagation: a :class:`~edgetorch.exir.tensor.TensorSpec` on every tensor value of a graph.

Nodes that alias another value (``getitem``, in-place write-back, control-flow
operands inside a branch) share the spec object of the value they alias.
May import torch.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch._higher_order_ops.executorch_call_delegate import executorch_call_delegate
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.dialects import to_aten
from edgetorch.exir.tensor import DTYPE_TO_SCALAR, TensorSpec, make_spec, spec_leaves  # noqa: F401  (re-exported)
from edgetorch.format.program import TensorShapeDynamism

MAP = torch.ops.higher_order.map_impl
SCAN = torch.ops.higher_order.scan
CONTROL_FLOW_OPS = (torch.ops.higher_order.cond, MAP, SCAN)
DELEGATE_CALL = executorch_call_delegate


def subgraphs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The ``get_attr`` nodes of a control-flow node's graphs: a cond's two branches, a map's body, a scan's
    combine function."""
    return [node.args[0]] if node.target in (MAP, SCAN) else list(node.args[1:3])


def is_inplace(target: Any) -> bool:
    """True for ops that mutate and return their first argument (``aten.copy_``)."""
    schema = getattr(to_aten(target), "_schema", None)
    return (
        bool(schema and schema.returns and schema.arguments)
        and _writes(schema.arguments[0])
        and not any(a.is_out for a in schema.arguments)
    )


def _writes(arg: torch._C.Argument) -> bool:
    return arg.alias_info is not None and arg.alias_info.is_write


class SpecPropPass(PassBase):
    """Attach ``node.meta["spec"]`` to every node of a graph module and of its control-flow branches."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        propagate_specs(graph_module)
        return PassResult(graph_module, True)


def propagate_specs(gm: torch.fx.GraphModule, operand_specs: list | None = None) -> None:
    """Set specs on ``gm``'s nodes; ``operand_specs`` are shared by its placeholders (for branch graphs)."""
    placeholders = iter(operand_specs or ())
    for node in gm.graph.nodes:
        if node.op == "placeholder" and operand_specs is not None:
            node.meta["spec"] = next(placeholders)
        elif node.op == "call_function" and node.target is operator.getitem:
            parent = node.args[0].meta.get("spec")
            node.meta["spec"] = parent[node.args[1]] if isinstance(parent, (list, tuple)) else None
        elif node.op == "call_function" and is_inplace(node.target):
            node.meta["spec"] = node.args[0].meta["spec"]
        elif node.op in ("placeholder", "call_function"):
            node.meta["spec"] = make_spec(node.meta.get("val"), node.name)
        elif node.op == "output":  # the returned values' own specs, in the output's structure
            node.meta["spec"] = torch.fx.node.map_arg(node.args[0], lambda n: n.meta.get("spec"))
        if node.op == "call_function" and node.target in CONTROL_FLOW_OPS:
            _propagate_branches(gm, node)


def _propagate_branches(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    if node.target is MAP:  # the body reads one row of the mapped tensor (a tensor of its own), then the operands
        body, mapped, operands = node.args
        for result in spec_leaves(node.meta.get("spec")):  # grown a row at a time by et_copy_index
            result.shape_dynamism = TensorShapeDynamism.DYNAMIC_BOUND
        row = TensorSpec.from_val(mapped[0].meta["val"][0])
        specs = [row] + [a.meta.get("spec") if isinstance(a, torch.fx.Node) else None for a in operands]
        propagate_specs(getattr(gm, body.target), specs)
        return
    if node.target is SCAN:  # the combine function reads the carries (the scan's own first results), a row of
        combine, init, xs, additional = node.args  # each scanned tensor, then the additional inputs
        results = spec_leaves(node.meta.get("spec"))
        for stacked in results[len(init) :]:  # grown a row at a time by et_copy_index
            stacked.shape_dynamism = TensorShapeDynamism.DYNAMIC_BOUND
        rows = [TensorSpec.from_val(x.meta["val"][0]) for x in xs]
        extra = [a.meta.get("spec") if isinstance(a, torch.fx.Node) else None for a in additional]
        propagate_specs(getattr(gm, combine.target), [*results[: len(init)], *rows, *extra])
        return
    _, true_fn, false_fn, operands = node.args
    specs = [a.meta.get("spec") if isinstance(a, torch.fx.Node) else None for a in operands]
    for branch in (true_fn, false_fn):
        propagate_specs(getattr(gm, branch.target), specs)


def graph_specs(gm: torch.fx.GraphModule) -> list[TensorSpec]:
    """Every distinct TensorSpec of ``gm`` and its branches, in order of first appearance."""
    seen: dict[int, TensorSpec] = {}
    for node in gm.graph.nodes:
        for spec in spec_leaves(node.meta.get("spec")):
            seen.setdefault(id(spec), spec)
        if node.op == "call_function" and node.target in CONTROL_FLOW_OPS:
            for branch in subgraphs(node):
                for spec in graph_specs(getattr(gm, branch.target)):
                    seen.setdefault(id(spec), spec)
    return list(seen.values())


TRAINABLE = "weight_has_gradient"
"""Placeholder meta key: a parameter a joint graph computes the gradient of, so planned, mutable state."""


def _plain_layout(tensor: torch.Tensor) -> bool:
    """Contiguous, or channels-last (a 4-d tensor): the layouts a program keeps a tensor's data in."""
    if tensor.is_contiguous():
        return True
    return tensor.dim() == 4 and tensor.is_contiguous(memory_format=torch.channels_last)


def mark_constants(ep: ExportedProgram) -> None:
    """Give placeholders their data: parameters, constant buffers and lifted constants become constants;
    mutated buffers and trainable parameters keep their initial value in ``storage`` but stay planned,
    non-constant tensors."""
    sig = ep.graph_signature
    mutated = set(sig.buffers_to_mutate.values())
    names = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in names:
            fqn = names[node.name]
            data = ep.state_dict[fqn] if fqn in ep.state_dict else ep.constants[fqn]
            spec = node.meta["spec"]
            spec.const = fqn not in mutated and not node.meta.get(TRAINABLE, False)
            spec.storage = data.detach()
            if not _plain_layout(data):  # as ExecuTorch: other layouts are written contiguous
                spec.dim_order = tuple(range(data.dim()))
