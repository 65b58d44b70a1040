"""Spec propagation: a :class:`TensorSpec` on every tensor value of a graph.

A TensorSpec holds what memory planning and emission need to know about one
tensor: dtype, dim order, its shape (an upper bound when dynamic), whether it is
a constant, its lifetime and its planned place (``mem_id``, ``mem_offset``).
Nodes that alias another value (``getitem``, in-place write-back, control-flow
operands inside a branch) share the spec object of the value they alias.
May import torch.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch._higher_order_ops.executorch_call_delegate import executorch_call_delegate
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_base import PassBase, PassResult
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import bound_sympy

from edgetorch.exir.dialects._ops import to_aten
from edgetorch.format.program import ScalarType

DTYPE_TO_SCALAR: dict[torch.dtype, ScalarType] = {
    torch.uint8: ScalarType.BYTE,
    torch.int8: ScalarType.CHAR,
    torch.int16: ScalarType.SHORT,
    torch.int32: ScalarType.INT,
    torch.int64: ScalarType.LONG,
    torch.float16: ScalarType.HALF,
    torch.float32: ScalarType.FLOAT,
    torch.float64: ScalarType.DOUBLE,
    torch.bool: ScalarType.BOOL,
    torch.qint8: ScalarType.QINT8,
    torch.quint8: ScalarType.QUINT8,
    torch.qint32: ScalarType.QINT32,
    torch.bfloat16: ScalarType.BFLOAT16,
    torch.uint16: ScalarType.UINT16,
    torch.uint32: ScalarType.UINT32,
    torch.uint64: ScalarType.UINT64,
    torch.float8_e5m2: ScalarType.FLOAT8E5M2,
    torch.float8_e4m3fn: ScalarType.FLOAT8E4M3FN,
}

SymDim = Any  # an int or a torch.SymInt
CONTROL_FLOW_OPS = (torch.ops.higher_order.cond,)
DELEGATE_CALL = executorch_call_delegate


@dataclass(eq=False)
class TensorSpec:
    """What the planner and the emitter know about one tensor value (compared by identity)."""

    dtype: torch.dtype
    sym_shape: tuple[SymDim, ...]
    dim_order: tuple[int, ...]
    requires_grad: bool = False
    name: str = ""
    shape: tuple[int, ...] | None = None
    const: bool = False
    storage: torch.Tensor | None = None
    lifetime: list = field(default_factory=lambda: [None, None])
    mem_id: int | None = None
    mem_offset: int | None = None
    alias_of: TensorSpec | None = None
    """The spec whose bytes this one reuses (a ``memory.view``); such specs are not planned themselves."""

    @classmethod
    def from_val(cls, val: torch.Tensor, name: str = "") -> TensorSpec:
        return cls(val.dtype, tuple(val.shape), _dim_order(val), bool(val.requires_grad), name)

    @property
    def dynamic(self) -> bool:
        """True when some dimension is symbolic (planned at its upper bound)."""
        return any(isinstance(d, torch.SymInt) for d in self.sym_shape)

    @property
    def scalar_type(self) -> ScalarType:
        return DTYPE_TO_SCALAR[self.dtype]

    @property
    def nbytes(self) -> int:
        """Bytes at the planned (upper-bound) shape."""
        shape = self.shape if self.shape is not None else self.sym_shape
        return math.prod(shape) * self.dtype.itemsize

    def allocated_memory(self, alignment: int) -> int:
        """Bytes the tensor occupies in an arena: ``nbytes`` rounded up to ``alignment``."""
        return -(-self.nbytes // alignment) * alignment

    def __repr__(self) -> str:
        return f"TensorSpec({self.name}, {self.dtype}, {self.shape or self.sym_shape}, mem_id={self.mem_id}, offset={self.mem_offset})"


def _dim_order(val: torch.Tensor) -> tuple[int, ...]:
    try:
        return tuple(val.dim_order())
    except (RuntimeError, ValueError, TypeError):  # symbolic strides that cannot be ordered
        return tuple(range(val.dim()))


def make_spec(val: Any, name: str = "") -> Any:
    """A spec tree mirroring ``val``: TensorSpec for tensors, None for everything else."""
    if isinstance(val, torch.Tensor):
        return TensorSpec.from_val(val, name)
    if isinstance(val, (list, tuple)):
        return type(val)(make_spec(v, f"{name}[{i}]") for i, v in enumerate(val))
    return None


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
        if node.op == "call_function" and node.target in CONTROL_FLOW_OPS:
            _propagate_branches(gm, node)


def _propagate_branches(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
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
            for branch in node.args[1:3]:
                for spec in graph_specs(getattr(gm, branch.target)):
                    seen.setdefault(id(spec), spec)
    return list(seen.values())


def spec_leaves(spec: Any) -> list[TensorSpec]:
    """The TensorSpecs in a spec tree, in order."""
    if isinstance(spec, TensorSpec):
        return [spec]
    if isinstance(spec, (list, tuple)):
        return [leaf for s in spec for leaf in spec_leaves(s)]
    return []


TRAINABLE = "weight_has_gradient"
"""Placeholder meta key: a parameter a joint graph computes the gradient of, so planned, mutable state."""


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
            node.meta["spec"].const = fqn not in mutated and not node.meta.get(TRAINABLE, False)
            node.meta["spec"].storage = data.detach()


class ConstraintBasedSymShapeEvalPass(PassBase):
    """Resolve every spec's shape to the upper bound its symbols' value ranges allow."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        resolve_shapes(graph_module, upper_bound)
        return PassResult(graph_module, True)


class HintBasedSymShapeEvalPass(PassBase):
    """Resolve every spec's shape to the sizes of the example inputs (no headroom for other sizes)."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        resolve_shapes(graph_module, lambda d: int(d.node.hint) if isinstance(d, torch.SymInt) else int(d))
        return PassResult(graph_module, True)


def upper_bound(dim: SymDim) -> int:
    """The largest value ``dim`` can take; raises ValueError when it is unbounded."""
    if not isinstance(dim, torch.SymInt):
        return int(dim)
    node = dim.node
    bound = bound_sympy(node.expr, node.shape_env.var_to_range).upper
    if bound in (int_oo, sympy.oo):
        raise ValueError(
            f"dynamic dimension {node.expr} has no upper bound; give it one, e.g. torch.export.Dim('n', max=1024)"
        )
    return int(bound)


def resolve_shapes(gm: torch.fx.GraphModule, evaluate: Callable[[SymDim], int]) -> None:
    """Set ``spec.shape`` from ``spec.sym_shape`` for every spec of ``gm``."""
    for spec in graph_specs(gm):
        spec.shape = tuple(evaluate(d) for d in spec.sym_shape)
