"""Out-variant conversion: functional ops become their ``out`` overloads writing into ``memory.alloc`` tensors.

Also the other rewrites that turn an Edge graph into the execution dialect:
view ops become their ``*_copy`` forms, arithmetic on symbolic sizes becomes
``executorch_prim`` ops, graph asserts go, and mutated buffers get an
in-place ``aten.copy_`` write-back. May import torch.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from functools import cache
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind, TensorArgument
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.errors import UnsupportedOperatorError
from edgetorch.exir import memory
from edgetorch.exir.dialects import quantized, to_aten
from edgetorch.exir.dialects.out_variants import find_out_variant, parse_schema
from edgetorch.exir.passes.reinplace import writes_in_place
from edgetorch.exir.passes.remove_graph_asserts_pass import ASSERT_OPS
from edgetorch.exir.passes.spec_prop import CONTROL_FLOW_OPS, DELEGATE_CALL, is_inplace, subgraphs
from edgetorch.exir.tensor import TensorSpec, spec_leaves


class SymOp:
    """A scalar op on symbolic sizes, run by ExecuTorch's ``executorch_prim`` kernels."""

    def __init__(self, name: str, fn: Callable[..., Any]):
        self.op_name, self.overload = f"executorch_prim::{name}", "Scalar"
        self.fn = fn
        self.__name__ = f"{name}.Scalar"
        self.__module__ = "executorch_prim"

    def __call__(self, *args: Any) -> Any:
        return self.fn(*args)

    def __repr__(self) -> str:
        return f"executorch_prim.{self.__name__}"


SYM_OPS: dict[Callable[..., Any], SymOp] = {
    fn: SymOp(name, fn)
    for fn, name in [
        (operator.add, "add"), (operator.sub, "sub"), (operator.mul, "mul"), (operator.floordiv, "floordiv"),
        (operator.truediv, "truediv"), (operator.mod, "mod"), (operator.eq, "eq"), (operator.gt, "gt"),
        (operator.lt, "lt"), (operator.ge, "ge"), (operator.le, "le"), (operator.neg, "neg"),
        (math.ceil, "ceil"), (math.trunc, "trunc"), (builtins.round, "round"),
        (torch.sym_float, "sym_float"), (torch.sym_int, "sym_int"), (torch.sym_max, "sym_max"),
        (torch.sym_min, "sym_min"), (torch.sym_not, "sym_not"), (torch.sym_ite, "sym_ite"),
    ]
}  # fmt: skip

KEPT_OPS = {
    torch.ops.aten.sym_size.int,
    torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_stride.int,
    torch.ops.aten._local_scalar_dense.default,
}


def insert_buffer_write_back(ep: ExportedProgram) -> None:
    """Make each buffer (or user input) mutation an explicit ``aten.copy_(target, new_value)`` the output returns."""
    graph, signature = ep.graph, ep.graph_signature
    output = graph.output_node()
    placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    buffer_inputs = {fqn: name for name, fqn in signature.inputs_to_buffers.items()}
    results = list(output.args[0])
    for i, spec in enumerate(signature.output_specs):
        if spec.kind == OutputKind.BUFFER_MUTATION:
            target = placeholders[buffer_inputs[spec.target]]
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            target = placeholders[spec.target]
        else:
            continue
        if writes_in_place(results[i], target):
            continue  # already written in place (re-inplace pass): nothing to copy back
        with graph.inserting_before(output):
            copy = graph.call_function(torch.ops.aten.copy_.default, (target, results[i]))
        copy.meta["val"] = target.meta["val"]
        results[i] = copy
        spec.arg = TensorArgument(name=copy.name)
    output.args = (tuple(results),)


class ToOutVarPass(PassBase):
    """Rewrite every functional op call into its out variant fed by ``memory.alloc`` nodes.

    Runs after spec propagation and shape evaluation: the alloc nodes carry the
    specs of the values they create.
    """

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for node in list(graph_module.graph.nodes):
            if node.op == "call_function":
                _convert(graph_module, node)
        graph_module.graph.eliminate_dead_code()
        graph_module.recompile()
        return PassResult(graph_module, True)


def _convert(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    target = to_aten(node.target)
    if target in ASSERT_OPS:
        gm.graph.erase_node(node)
    elif target in SYM_OPS:
        node.target = SYM_OPS[target]
    elif target in CONTROL_FLOW_OPS:
        for branch in subgraphs(node):
            ToOutVarPass()(getattr(gm, branch.target))
    elif isinstance(target, quantized.OutOverload):
        return
    elif isinstance(target, torch._ops.OpOverload) and target not in KEPT_OPS and not is_inplace(target):
        _to_out_variant(gm, node, target)
    elif not isinstance(target, torch._ops.OpOverload) and target not in (operator.getitem, DELEGATE_CALL, memory.view):
        raise UnsupportedOperatorError(
            f"{_where(node)}: expected an operator overload as call target, found {node.target!r}; "
            "only ATen, Edge, custom and control-flow ops can be compiled"
        )


def _to_out_variant(gm: torch.fx.GraphModule, node: torch.fx.Node, target: torch._ops.OpOverload) -> None:
    copy_form = _copy_form(target)
    if copy_form is not target:  # a view's copy is a fresh contiguous tensor
        for spec in spec_leaves(node.meta["spec"]):
            spec.dim_order = tuple(range(len(spec.dim_order)))
    target = _scalar_overload(copy_form, node)
    out_op, out_names = _out_variant(target)
    if out_op is None:
        raise UnsupportedOperatorError(
            f"{_where(node)}: {target.name()} has no out variant, so it cannot run on planned memory; "
            "decompose it, delegate it to a backend, or register an out overload"
        )
    specs = node.meta["spec"]
    specs = list(specs) if isinstance(specs, (list, tuple)) else [specs]
    names = {a.name for a in out_op._schema.arguments}
    kwargs = {k: v for k, v in node.kwargs.items() if k in names}
    with gm.graph.inserting_before(node):
        if _is_list_out(out_op, out_names):
            kwargs[out_names[0]] = _alloc_node(gm, specs, _vals(node))
        else:
            for name, spec, val in zip(out_names, specs, _vals(node)):
                kwargs[name] = _alloc_node(gm, spec if spec is not None else _unused_out(specs), val)
    node.target = out_op
    node.kwargs = kwargs


def _unused_out(specs: list) -> TensorSpec:
    """An empty tensor for an out argument whose result the graph does not compute (``convolution_backward``'s
    input gradient under ``output_mask=[False, ...]``): the kernel leaves it alone."""
    dtype = next((s.dtype for s in specs if isinstance(s, TensorSpec)), torch.float32)
    return TensorSpec(dtype, (0,), shape=(0,))


def _vals(node: torch.fx.Node) -> list:
    val = node.meta.get("val")
    return list(val) if isinstance(val, (list, tuple)) else [val]


def _is_list_out(op: torch._ops.OpOverload, out_names: tuple[str, ...]) -> bool:
    """True for ops such as ``split_copy.Tensor_out`` whose single out argument is a list of tensors."""
    arg = next(a for a in op._schema.arguments if a.name == out_names[0])
    return len(out_names) == 1 and isinstance(arg.type, torch.ListType)


def _alloc_node(gm: torch.fx.GraphModule, spec: TensorSpec | list[TensorSpec], val: Any) -> torch.fx.Node:
    shapes = [(s.shape, s.dtype) for s in spec] if isinstance(spec, list) else (spec.shape, spec.dtype)
    alloc = gm.graph.call_function(memory.alloc, (shapes,))
    alloc.meta["spec"] = spec
    alloc.meta["val"] = val
    return alloc


def _copy_form(target: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """A view op's ``*_copy`` twin (``aten.view`` -> ``aten.view_copy``); other ops unchanged."""
    returns = target._schema.returns
    if not (returns and returns[0].alias_info is not None and not returns[0].alias_info.is_write):
        return target
    packet = getattr(getattr(torch.ops, target.namespace), f"{target._opname}_copy", None)
    return getattr(packet, target._overloadname, target) if packet is not None else target


def _scalar_overload(target: torch._ops.OpOverload, node: torch.fx.Node) -> torch._ops.OpOverload:
    """``add.Tensor(x, 2.0)`` -> ``add.Scalar``: a Python number cannot be passed where a Tensor is expected."""
    args = target._schema.arguments
    if not any(isinstance(a.type, torch.TensorType) and _is_scalar(v) for a, v in zip(args, node.args)):
        return target
    packet = target.overloadpacket
    scalar = getattr(packet, "Scalar", None) if "Scalar" in packet.overloads() else None
    return scalar if scalar is not None else target


def _is_scalar(value: Any) -> bool:
    """A Python number, or a node computing one (a symbolic size, ``Tensor.item()``)."""
    if isinstance(value, torch.fx.Node):
        value = value.meta.get("val")
    return isinstance(value, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool))


_out_variant = cache(find_out_variant)
_parse = parse_schema


def _where(node: torch.fx.Node) -> str:
    """The node's name and the last source line that produced it."""
    trace = [t.strip() for t in (node.meta.get("stack_trace") or "").strip().splitlines()]
    files = [i for i, t in enumerate(trace) if t.startswith("File ")]
    if not files:
        return f"node {node.name}"
    code = trace[files[-1] + 1] if files[-1] + 1 < len(trace) else ""
    return f"node {node.name} ({trace[files[-1]]}: {code})"
