"""Edge-dialect validity: which call targets and dtypes an Edge program may hold.

``verify_edge_graph`` walks a graph (and its control-flow submodules) and
raises :class:`SpecViolationError` naming the first offending node and the
user source line it came from. ``EdgeVerifier`` is the structural verifier
attached to every Edge ``ExportedProgram`` so torch accepts Edge op targets.
May import torch, edgetorch.exir and the runtime's kernel registry (an op outside Core ATen that
torch cannot decompose is valid when the runtime has its kernel).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterable
from functools import cache
from typing import Any

import torch
from torch._export.verifier import SpecViolationError as _TorchSpecViolationError
from torch._export.verifier import Verifier

from edgetorch.errors import EdgetorchError, UnsupportedOperatorError
from edgetorch.exir.dialects import EdgeOpOverload
from edgetorch.exir.dialects.dtype_constraints import dtype_constraint, node_tensor_dtypes
from edgetorch.exir.passes.decompose import core_aten_decompositions
from edgetorch.exir.passes.out_variant import _copy_form, _out_variant
from edgetorch.exir.passes.to_edge import NOT_EDGE_OPS
from edgetorch.runtime.kernels.registry import KERNELS

# Every dtype an ExecuTorch tensor may have (its ScalarType enum; complex64/128 use the codes 9/10 that
# ExecuTorch's Python ScalarType defines and its schema leaves commented out; complex32 has no NumPy type).
SUPPORTED_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint16,
        torch.uint32,
        torch.uint64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
        torch.float8_e5m2,
        torch.float8_e4m3fn,
        torch.float8_e5m2fnuz,
        torch.float8_e4m3fnuz,
        torch.qint8,
        torch.quint8,
        torch.qint32,
    }
)

_SYM_MODULES = {"_operator", "builtins", "math"}
_TORCH_SYM_FNS = {torch.sym_int, torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_ite}


class SpecViolationError(EdgetorchError, _TorchSpecViolationError, ValueError):
    """A graph is not valid Edge dialect (an op outside the Edge op set, an unsupported dtype, ...)."""


class EdgeVerifier(Verifier):
    """Structural verifier for Edge ExportedPrograms: lets torch accept EdgeOpOverload targets.

    Op-set and dtype rules are enforced by :func:`verify_edge_graph`, which knows the compile config.
    """

    dialect = "EDGE"

    def allowed_op_types(self) -> tuple[type[Any], ...]:
        return (*super().allowed_op_types(), EdgeOpOverload)

    def allowed_getattr_types(self) -> tuple[type[Any], ...]:
        return (torch.fx.GraphModule, torch.nn.Module, torch.Tensor)

    def check_valid_op(self, op: Any) -> None:
        return None


def _is_core(op: torch._ops.OpOverload) -> bool:
    return op.namespace != "aten" or torch.Tag.core in op.tags or torch.Tag.view_copy in op.tags


def _is_symbolic(target: Any) -> bool:
    return getattr(target, "__module__", None) in _SYM_MODULES or target in _TORCH_SYM_FNS


def _where(node: torch.fx.Node) -> str:
    trace = node.meta.get("stack_trace")
    if not trace:
        return "(no source location recorded)"
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    return " | ".join(lines[-2:])


def _fail(node: torch.fx.Node, problem: str, hint: str) -> None:
    raise SpecViolationError(f"{problem} (node {node.name} = {node.format_node()}). {hint} Source: {_where(node)}")


@cache
def _decomposed_ops() -> frozenset:
    return frozenset(core_aten_decompositions())


def _runs_whole(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` reaches the runtime as it is: torch has no decomposition for it and the runtime a kernel.

    ExecuTorch makes such exceptions by name (aten.max.default, aten.min.default); this is the general rule.
    """
    out, _ = _out_variant(_copy_form(op))
    return op not in _decomposed_ops() and out is not None and out.name() in KERNELS


def _check_target(node: torch.fx.Node, allowed_aten: set) -> None:
    target = node.target
    if isinstance(target, EdgeOpOverload):
        if _is_core(target._op) or target._op in allowed_aten or _runs_whole(target._op):
            return
        _fail(
            node,
            f"{target} is not in the Core ATen op set",
            "Decompose it, or list it in EdgeCompileConfig(_core_aten_ops_exception_list=[...]) "
            "if your runtime has a kernel for it.",
        )
    if target in NOT_EDGE_OPS or target is operator.getitem or _is_symbolic(target):
        return
    if isinstance(target, torch._ops.HigherOrderOperator):
        return
    if isinstance(target, torch._ops.OpOverload):
        _fail(
            node,
            f"target {target} is an ATen op, not an Edge op",
            "Passes on Edge programs must emit exir_ops.edge.* targets (e.g. exir_ops.edge.aten.relu.default).",
        )
    _fail(node, f"target {target!r} is not an operator", "Edge graphs may call only ATen/Edge or registered ops.")


def _check_dtypes(node: torch.fx.Node) -> None:
    for value in torch.utils._pytree.tree_leaves(node.meta.get("val")):
        if isinstance(value, torch.Tensor) and value.dtype not in SUPPORTED_DTYPES:
            _fail(
                node,
                f"produces a {value.dtype} tensor, which ExecuTorch has no scalar type for",
                "Cast to a supported dtype (e.g. float32) before this op.",
            )


def _check_edge_dtypes(node: torch.fx.Node) -> None:
    """Refuse an Edge op whose tensors' dtypes are no combination the op allows (see dialects.dtype_constraints)."""
    op = node.target._op
    constraint = dtype_constraint(op)
    if constraint is None or "val" not in node.meta:
        return
    types = node_tensor_dtypes(op, node)
    if constraint.validate(types):
        return
    if any(dtype is not None and dtype.is_complex for dtype in types.values()):
        return  # the table was measured over real dtypes only; complex ops are checked by their kernels
    found = ", ".join(f"{name}: {_short(dtype)}" for name, dtype in types.items())
    allowed = "; ".join(
        f"{name} in {{{', '.join(sorted(_short(d) for d in constraint[name]))}}}" for name in constraint.names
    )
    _fail(
        node,
        f"{node.target} does not take this dtype combination ({found}); allowed, in some combination: {allowed}",
        "Cast the inputs to an allowed dtype, or fix the pass that made this node.",
    )


def _short(dtype: torch.dtype | None) -> str:
    return str(dtype).removeprefix("torch.")


def _flat_nodes(graph_module: torch.fx.GraphModule, hint: str) -> Iterable[torch.fx.Node]:
    """Every node of the graph and its submodules, refusing module and method calls."""
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if node.op in ("call_module", "call_method"):
                    _fail(node, f"{node.op} nodes are not allowed", hint)
                yield node


def check_preserve_ops(ops: Iterable[Any]) -> None:
    """Refuse ops that cannot be kept whole through decomposition: non-ATen ops and views.

    A preserved view would reach memory planning as an alias it does not plan for; a preserved mutating op
    never shows up (functionalization rewrites it), so it only gets a warning.
    """
    for op in ops:
        if not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
            raise UnsupportedOperatorError(
                f"Only preserve aten ops: expected aten OpOverloads in preserve_ops, found {op!r}; "
                "other namespaces are never decomposed, so leave them out"
            )
        if op.is_view:
            raise UnsupportedOperatorError(
                f"Cannot preserve operator {op} because it is a view: remove it from preserve_ops "
                "(its *_copy form is what Edge programs hold)"
            )
        if op._schema.is_mutable:
            warnings.warn(f"preserving the mutating op {op} does nothing: export functionalizes it away", stacklevel=3)


def verify_aten_graph(graph_module: torch.fx.GraphModule) -> None:
    """Raise SpecViolationError unless ``graph_module`` is a flat ATen graph ``to_edge`` can lower."""
    for node in _flat_nodes(graph_module, "Export the model with torch.export.export."):
        target = node.target
        if node.op != "call_function" or isinstance(target, torch._ops.OpOverload | torch._ops.HigherOrderOperator):
            continue
        if target is operator.getitem or _is_symbolic(target) or isinstance(target, EdgeOpOverload):
            continue
        _fail(node, f"target {target!r} is not an operator", "ATen graphs may call only ATen or registered ops.")


def verify_edge_graph(graph_module: torch.fx.GraphModule, allowed_aten: Iterable[Any] = ()) -> None:
    """Raise SpecViolationError unless every node of ``graph_module`` (and its submodules) is valid Edge IR.

    ``allowed_aten`` lists ATen ops accepted although they are not Core ATen
    (ops preserved from decomposition, or the user's exception list).
    """
    allowed = set(allowed_aten)
    for node in _flat_nodes(graph_module, "Edge graphs are flat: use call_function on ops."):
        if node.op == "call_function":
            _check_target(node, allowed)
            if isinstance(node.target, EdgeOpOverload):
                _check_edge_dtypes(node)
        if node.op in ("call_function", "placeholder"):
            _check_dtypes(node)


__all__ = [
    "check_preserve_ops",
    "EdgeVerifier",
    "SUPPORTED_DTYPES",
    "SpecViolationError",
    "verify_aten_graph",
    "verify_edge_graph",
]
