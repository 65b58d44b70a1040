"""Edge graph -> ``XNNGraph``: the node visitors that say what each Edge op becomes in an XNNPACK blob.

Convolutions, pooling, global average pooling, bilinear resize and PReLU work
on channels-last (NHWC) tensors inside the graph. Every 4-d value is kept in the
layout its producer made it in; a consumer that needs the other layout gets a
transpose, made once per value. Element-wise ops run in whichever layout their
input has, so a conv -> relu -> pool chain never leaves NHWC. The delegate's
inputs and outputs are contiguous (NCHW). Constant tensors are written in the
layout each use asks for, as named data of the program (or of its ``.ptd``).
Nodes whose inputs are all constants are evaluated here with torch and become
constants. Every graph passes ``validate.validate_graph`` before it is written.

May import torch and edgetorch.exir.
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import CONSTANT_ALIGNMENT, build_blob
from edgetorch.backends.xnnpack.validate import validate_graph
from edgetorch.errors import EdgetorchError
from edgetorch.exir.backend.lowered_backend_module import user_inputs, user_outputs
from edgetorch.exir.backend.utils import DelegateMappingBuilder
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.dialects.dim_order_ops import ensure_registered
from edgetorch.exir.named_data_store import NamedDataStore
from edgetorch.exir.passes.sym_shape_eval_pass import upper_bound

__all__ = ["XnnpackGraphBuilder", "VISITORS", "XnnpackLoweringError"]

ensure_registered()
aten = torch.ops.aten
Node = torch.fx.Node
Visitor = Callable[["XnnpackGraphBuilder", Node], None]

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)
DEFAULT_DEBUG_HANDLE = 65535
CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)

VISITORS: dict[Any, Visitor] = {}
"""ATen op -> the visitor that writes its XNNPACK nodes; the partitioner delegates exactly these ops."""


class XnnpackLoweringError(EdgetorchError, RuntimeError):
    """A node handed to the XNNPACK backend cannot be expressed in an XNNPACK graph."""


def visits(*ops: Any) -> Callable[[Visitor], Visitor]:
    def register(fn: Visitor) -> Visitor:
        for op in ops:
            VISITORS[op] = fn
        return fn

    return register


def dims_of(node: Node) -> list[int]:
    """The node's shape at its upper bound; a 0-d tensor is [1] in XNNPACK."""
    return [upper_bound(d) for d in node.meta["val"].shape] or [1]


def is_dynamic(node: Node) -> bool:
    return any(isinstance(d, torch.SymInt) for d in node.meta["val"].shape)


def permuted(dims: Sequence[int], perm: Sequence[int]) -> list[int]:
    return [dims[p] for p in perm]


def constant_placeholders(program: ExportedProgram) -> dict[Node, torch.Tensor]:
    """The placeholders of ``program`` that hold parameters, buffers or constants, with their tensors."""
    sig = program.graph_signature
    targets = {s.arg.name: s.target for s in sig.input_specs if s.kind in CONSTANT_KINDS}
    found = {}
    for node in program.graph.nodes:
        if node.op == "placeholder" and node.name in targets:
            target = targets[node.name]
            found[node] = (program.state_dict if target in program.state_dict else program.constants)[target].detach()
    return found


class XnnpackGraphBuilder:
    """Writes one Edge program (the part a partitioner gave XNNPACK) as an XNNGraph plus constant data.

    ``constant_overrides`` replaces the tensor of a node (e.g. a convolution's
    weight with a batch norm folded in); ``aliases`` maps a node to the node
    whose value it is (e.g. the folded batch norm's output to the conv).
    """

    def __init__(
        self,
        program: ExportedProgram,
        constant_overrides: dict[Node, tuple[torch.Tensor, ...]] | None = None,
        aliases: dict[Node, Node] | None = None,
    ) -> None:
        self.program = program
        self.overrides = constant_overrides or {}
        self.aliases = aliases or {}
        self.graph = xs.XNNGraph(
            version="0",
            xnodes=[],
            xvalues=[],
            num_externs=0,
            input_ids=[],
            output_ids=[],
            constant_data=[xs.ConstantDataOffset(0, 0)],
        )
        self.named_data = NamedDataStore()
        self.ids: dict[tuple[Node, bool], int] = {}
        self.constants: dict[Node, torch.Tensor] = constant_placeholders(program)
        self.inputs = user_inputs(program)
        self.outputs = user_outputs(program)
        self.external = {n: i for i, n in enumerate(self.inputs)}
        for node in self.outputs:
            if node in self.external:
                raise XnnpackLoweringError(
                    f"{node.name} is both an input and an output of the XNNPACK partition (a pass-through); "
                    "XNNPACK cannot return its inputs, so leave the node producing it out of the partition"
                )
            self.external[node] = len(self.external)
        self.graph.num_externs = len(self.external)
        self.debug = DelegateMappingBuilder()
        self._debug_handle = DEFAULT_DEBUG_HANDLE

    # ------------------------------------------------------------------ driver

    def build(self) -> tuple[bytes, dict]:
        """The blob bytes and the debug handle map (XNNPACK node debug handle -> Edge debug handles)."""
        for node in self.inputs:
            if not node.meta["val"].dtype == torch.float32:
                raise XnnpackLoweringError(f"input {node.name} is {node.meta['val'].dtype}; XNNPACK lowers float32")
            self._new_value(node, False)
        for node in self.program.graph.nodes:
            if node.op == "call_function":
                self._visit(node)
        for node in self.outputs:
            self._emit_output(node)
        self.graph.input_ids.sort(key=lambda i: xs.tensor_value(self.graph.xvalues[i]).external_id)
        self.graph.output_ids.sort(key=lambda i: xs.tensor_value(self.graph.xvalues[i]).external_id)
        named = self.named_data.get_named_data_store_output()
        keys = [*named.pte_data, *(key for entries in named.external_data.values() for key in entries)]
        validate_graph(self.graph, named_keys=keys, num_inputs=len(self.inputs), num_outputs=len(self.outputs))
        return build_blob(self.graph, b""), self.debug.get_delegate_mapping()

    def _visit(self, node: Node) -> None:
        if node in self.aliases:
            return
        if self._foldable(node):
            self.constants[node] = self._evaluate(node)
            return
        op = to_aten(node.target)
        visitor = VISITORS.get(op)
        if visitor is None:
            raise XnnpackLoweringError(
                f"node {node.format_node()} (operator {op}) is not supported by the XNNPACK backend; "
                "partition with XnnpackPartitioner, which leaves such nodes to the portable runtime"
            )
        handle = node.meta.get("debug_handle")
        self._debug_handle = DEFAULT_DEBUG_HANDLE if handle is None else int(handle)
        visitor(self, node)
        if handle is not None and self._debug_handle not in self.debug.get_delegate_mapping():
            self.debug.insert_delegate_mapping_entry(handles=[handle], identifier=self._debug_handle)

    def _emit_output(self, node: Node) -> None:
        """Make sure ``node``'s external output value is written (by a transpose or copy if nothing wrote it)."""
        if (node, False) in self.ids:
            return
        source = self.aliases.get(node, node)
        nhwc = self.in_nhwc(source)
        value = self.value(source, nhwc)
        out = self._external_output(node)
        if nhwc:
            self.add(xs.XNNStaticTranspose(num_dims=4, perm=list(TO_NCHW), input_id=value, output_id=out, flags=0))
        else:
            self.add(xs.XNNCopy(input_id=value, output_id=out, flags=0))

    # ---------------------------------------------------------------- constants

    def is_constant(self, arg: Any) -> bool:
        return isinstance(arg, Node) and self.aliases.get(arg, arg) in self.constants

    def tensor(self, arg: Node) -> torch.Tensor:
        """The constant tensor of ``arg`` (a parameter, buffer, constant, or folded node)."""
        return self.constants[self.aliases.get(arg, arg)]

    def _foldable(self, node: Node) -> bool:
        inputs = node.all_input_nodes
        return bool(inputs) and all(self.is_constant(a) for a in inputs) and node not in self.overrides

    def _evaluate(self, node: Node) -> torch.Tensor:
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), self.tensor)
        with torch.no_grad():
            result = to_aten(node.target)(*args, **kwargs)
        if not isinstance(result, torch.Tensor):
            raise XnnpackLoweringError(f"constant node {node.name} does not produce one tensor")
        return result

    def constant(self, tensor: torch.Tensor, external_tag: str | None = None) -> int:
        """A new static value holding ``tensor`` (as float32), stored as named data keyed by the SHA-256 of its
        bytes: in the program, or with an ``external_tag`` in ``<external_tag>.ptd``.

        Never in the blob's own constant segment: ExecuTorch's XNNPACK runtime frees the blob once it has
        compiled it, while XNNPACK keeps pointing at the static operands of element-wise nodes (a scale, a
        mask) and reads them at every run; named data stays mapped for the life of the program.
        """
        data = tensor.detach().to(torch.float32).contiguous()
        raw = data.numpy().tobytes()
        index = len(self.graph.constant_data)
        key = hashlib.sha256(raw).hexdigest()
        self.named_data.add_named_data(key, raw, CONSTANT_ALIGNMENT, external_tag)
        self.graph.constant_data.append(
            xs.ConstantDataOffset(offset=xs.NAMED_CONSTANT_OFFSET, size=len(raw), named_key=key)
        )
        return self._define(list(data.shape) or [1], constant_index=index)

    def external_tag(self, *args: Any) -> str | None:
        """The tag under which constants made from ``args`` are kept outside the program, or None.

        A placeholder's tag is its ``meta["custom"]["delegate_constant_tag"]``; a constant folded from other
        nodes has the tag its inputs share. Untagged or disagreeing inputs keep the constant in the blob.
        """
        tags = set()
        for arg in args:
            if arg is None:
                continue
            node = self.aliases.get(arg, arg)
            if node.op == "placeholder":
                tags.add((node.meta.get("custom") or {}).get("delegate_constant_tag"))
            else:
                tags.add(self.external_tag(*node.all_input_nodes) if node.all_input_nodes else None)
        return tags.pop() if len(tags) == 1 else None

    def scalar(self, value: float) -> int:
        return self.constant(torch.tensor([float(value)]))

    # ------------------------------------------------------------------- values

    def _define(self, dims: Sequence[int], constant_index: int = 0, external: int | None = None, flag: int = 0) -> int:
        vid = len(self.graph.xvalues)
        value = xs.XNNTensorValue(
            datatype=xs.XNNDatatype.xnn_datatype_fp32,
            num_dims=len(dims),
            dims=[int(d) for d in dims],
            constant_buffer_idx=constant_index,
            external_id=xs.INVALID_VALUE_ID if external is None else external,
            flags=flag,
            id_out=vid,
        )
        self.graph.xvalues.append(xs.XValue(value))
        if flag == xs.VALUE_FLAG_EXTERNAL_INPUT:
            self.graph.input_ids.append(vid)
        elif flag == xs.VALUE_FLAG_EXTERNAL_OUTPUT:
            self.graph.output_ids.append(vid)
        return vid

    def internal(self, dims: Sequence[int]) -> int:
        """A new value computed inside the graph."""
        return self._define(dims)

    def _external_output(self, node: Node) -> int:
        vid = self._define(dims_of(node), external=self.external[node], flag=xs.VALUE_FLAG_EXTERNAL_OUTPUT)
        self.ids[node, False] = vid
        return vid

    def _new_value(self, node: Node, nhwc: bool) -> int:
        if node in self.inputs and not nhwc:
            vid = self._define(dims_of(node), external=self.external[node], flag=xs.VALUE_FLAG_EXTERNAL_INPUT)
        elif node in self.outputs and not nhwc:
            return self._external_output(node)
        else:
            dims = dims_of(node)
            vid = self.internal(permuted(dims, TO_NHWC) if nhwc else dims)
        self.ids[node, nhwc] = vid
        return vid

    def in_nhwc(self, arg: Any) -> bool:
        """Whether ``arg``'s value is (only) available channels-last: element-wise consumers then stay NHWC."""
        if not isinstance(arg, Node) or self.is_constant(arg):
            return False
        arg = self.aliases.get(arg, arg)
        return (arg, True) in self.ids and (arg, False) not in self.ids

    def value(self, arg: Any, nhwc: bool = False) -> int:
        """The value id of ``arg`` (a node or a number) in the requested layout, transposing once if needed."""
        if not isinstance(arg, Node):
            return self.scalar(arg)
        arg = self.aliases.get(arg, arg)
        key = (arg, nhwc)
        if key in self.ids:
            return self.ids[key]
        if arg in self.constants:
            t = self.constants[arg]
            vid = self.ids[key] = self.constant(
                t.permute(TO_NHWC) if nhwc and t.dim() == 4 else t, self.external_tag(arg)
            )
            return vid
        if (arg, not nhwc) not in self.ids:
            raise XnnpackLoweringError(f"{arg.name} is used before the XNNPACK graph defines it")
        source = self.ids[arg, not nhwc]
        target = self._new_value(arg, nhwc)
        self.add(
            xs.XNNStaticTranspose(
                num_dims=4, perm=list(TO_NHWC if nhwc else TO_NCHW), input_id=source, output_id=target, flags=0
            )
        )
        return target

    def output(self, node: Node, nhwc: bool = False) -> int:
        """A new value for ``node``'s result, produced in the given layout."""
        return self._new_value(node, nhwc)

    def alias(self, node: Node, source: Node) -> None:
        """Make ``node`` share ``source``'s value (for no-op copies); a graph output still gets its own copy."""
        self.aliases[node] = self.aliases.get(source, source)

    # -------------------------------------------------------------------- nodes

    def add(self, union: Any, clamp: tuple[float, float] | None = None) -> None:
        minmax = xs.OutputMinMax(*clamp) if clamp is not None else None
        self.graph.xnodes.append(xs.XNode(xnode_union=union, debug_handle=self._debug_handle, output_min_max=minmax))

    def transpose(self, source: int, perm: Sequence[int], dims: Sequence[int]) -> int:
        out = self.internal(permuted(dims, perm))
        self.add(xs.XNNStaticTranspose(num_dims=len(perm), perm=list(perm), input_id=source, output_id=out, flags=0))
        return out

    def reshape(self, source: int, shape: Sequence[int], out: int | None = None) -> int:
        """Reshape ``source`` to ``shape``, where 0 marks the one dimension XNNPACK infers."""
        if out is None:
            # The new value's dims at the upper bound: the inferred one holds what the others leave of the input.
            total = math.prod(xs.tensor_value(self.graph.xvalues[source]).dims)
            out = self.internal([d or total // math.prod(d for d in shape if d) for d in shape])
        self.add(
            xs.XNNStaticReshape(num_dims=len(shape), new_shape=list(shape), input_id=source, output_id=out, flags=0)
        )
        return out


def reshape_target(node: Node) -> list[int]:
    """``node``'s output shape for XNNStaticReshape: static sizes, and 0 for the (one) dynamic one."""
    shape = [0 if isinstance(d, torch.SymInt) else int(d) for d in node.meta["val"].shape]
    if shape.count(0) > 1 and is_dynamic(node):
        raise XnnpackLoweringError(f"{node.name} reshapes to {shape}: XNNPACK infers at most one dynamic dimension")
    return shape


# ---------------------------------------------------------------- element-wise

_UNARY = {
    aten.sigmoid.default: xs.XNNSigmoid,
    aten.tanh.default: xs.XNNTanh,
    aten.exp.default: xs.XNNExp,
    aten.log.default: xs.XNNLog,
    aten.sqrt.default: xs.XNNSquareRoot,
    aten.rsqrt.default: xs.XNNReciprocalSquareRoot,
    aten.abs.default: xs.XNNAbs,
    aten.neg.default: xs.XNNNegate,
    aten.floor.default: xs.XNNFloor,
    aten.ceil.default: xs.XNNCeiling,
    aten.hardswish.default: xs.XNNHardswish,
    aten.gelu.default: xs.XNNGelu,
    aten.sin.default: xs.XNNSin,
    aten.cos.default: xs.XNNCos,
    aten.pow.Tensor_Scalar: xs.XNNSquare,
}


@visits(*_UNARY)
def _unary(b: XnnpackGraphBuilder, node: Node) -> None:
    kind = _UNARY[to_aten(node.target)]
    elementwise(b, node, lambda x, y: kind(input_id=x, output_id=y, flags=0))


def elementwise(b: XnnpackGraphBuilder, node: Node, make: Callable[[int, int], Any], clamp: Any = None) -> None:
    """A one-input element-wise node (built by ``make(input_id, output_id)``) in its input's layout."""
    nhwc = b.in_nhwc(node.args[0])
    x = b.value(node.args[0], nhwc)
    b.add(make(x, b.output(node, nhwc)), clamp=clamp)


def clamp_bounds(node: Node) -> tuple[float, float]:
    """The (min, max) a clamp-like node limits its output to."""
    op = to_aten(node.target)
    if op == aten.relu.default:
        return 0.0, math.inf
    if op == aten.hardtanh.default:
        lo = node.args[1] if len(node.args) > 1 else -1.0
        hi = node.args[2] if len(node.args) > 2 else 1.0
        return float(lo), float(hi)
    lo = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    hi = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    return (-math.inf if lo is None else float(lo)), (math.inf if hi is None else float(hi))


@visits(aten.relu.default, aten.clamp.default, aten.hardtanh.default)
def _clamp(b: XnnpackGraphBuilder, node: Node) -> None:
    elementwise(b, node, lambda x, y: xs.XNNClamp(input_id=x, output_id=y, flags=0), clamp=clamp_bounds(node))


@visits(aten.leaky_relu.default)
def _leaky_relu(b: XnnpackGraphBuilder, node: Node) -> None:
    slope = float(node.args[1]) if len(node.args) > 1 else 0.01
    elementwise(b, node, lambda x, y: xs.XNNLeakyReLU(negative_slope=slope, input_id=x, output_id=y, flags=0))


@visits(aten.elu.default)
def _elu(b: XnnpackGraphBuilder, node: Node) -> None:
    alpha = float(node.args[1]) if len(node.args) > 1 else 1.0
    elementwise(b, node, lambda x, y: xs.XNNELU(alpha=alpha, input_id=x, output_id=y, flags=0))


_BINARY = {
    aten.add.Tensor: xs.XNNAdd,
    aten.add.Scalar: xs.XNNAdd,
    aten.sub.Tensor: xs.XNNSubtract,
    aten.sub.Scalar: xs.XNNSubtract,
    aten.mul.Tensor: xs.XNNMultiply,
    aten.mul.Scalar: xs.XNNMultiply,
    aten.div.Tensor: xs.XNNDiv,
    aten.div.Scalar: xs.XNNDiv,
    aten.minimum.default: xs.XNNMinimum,
    aten.maximum.default: xs.XNNMaximum,
}


def binary_in_nhwc(b: XnnpackGraphBuilder, node: Node, operands: Sequence[Any]) -> bool:
    """Run a broadcasting op channels-last when an input already is and every operand is 4-d or one element."""
    if len(node.meta["val"].shape) != 4 or not any(b.in_nhwc(a) for a in operands):
        return False
    return all(not isinstance(a, Node) or a.meta["val"].dim() == 4 or a.meta["val"].numel() == 1 for a in operands)


@visits(*_BINARY)
def _binary(b: XnnpackGraphBuilder, node: Node) -> None:
    lhs, rhs = node.args[:2]
    alpha = node.kwargs.get("alpha", 1)
    nhwc = binary_in_nhwc(b, node, (lhs, rhs))
    x = b.value(lhs, nhwc)
    if alpha != 1:
        y = b.internal(dims_of(rhs) if isinstance(rhs, Node) else [1])
        b.add(xs.XNNMultiply(input1_id=b.value(rhs, nhwc), input2_id=b.scalar(alpha), output_id=y, flags=0))
    else:
        y = b.value(rhs, nhwc)
    kind = _BINARY[to_aten(node.target)]
    b.add(kind(input1_id=x, input2_id=y, output_id=b.output(node, nhwc), flags=0))


@visits(aten._softmax.default, aten._log_softmax.default)
def _softmax(b: XnnpackGraphBuilder, node: Node) -> None:
    x = b.value(node.args[0])
    out = b.output(node)
    if to_aten(node.target) == aten._softmax.default:
        b.add(xs.XNNSoftmax(input_id=x, output_id=out, flags=0))
        return
    probabilities = b.internal(dims_of(node))
    b.add(xs.XNNSoftmax(input_id=x, output_id=probabilities, flags=0))
    b.add(xs.XNNLog(input_id=probabilities, output_id=out, flags=0))


@visits(aten.prelu.default)
def _prelu(b: XnnpackGraphBuilder, node: Node) -> None:
    x, weight = node.args
    rank = x.meta["val"].dim()
    channels = dims_of(x)[1] if rank > 1 else 1
    slope = b.constant(b.tensor(weight).reshape(-1).expand(channels), b.external_tag(weight))
    out = b.output(node, nhwc=rank == 4)
    if rank == 4:
        b.add(xs.XNNPReLU(input1_id=b.value(x, True), input2_id=slope, output_id=out, flags=0))
        return
    # PReLU's slope runs along XNNPACK's last dimension, which is channels only for 2-d inputs.
    b.add(xs.XNNPReLU(input1_id=b.value(x), input2_id=slope, output_id=out, flags=0))


# ------------------------------------------------------------- copies, shapes


@visits(
    aten.clone.default,
    aten.alias_copy.default,
    aten.expand_copy.default,
    aten._to_copy.default,
    torch.ops.dim_order_ops._clone_dim_order.default,
    torch.ops.dim_order_ops._to_dim_order_copy.default,
)
def _copy(b: XnnpackGraphBuilder, node: Node) -> None:
    source = node.args[0]
    if node in b.outputs:
        nhwc = b.in_nhwc(source)
        b.add(xs.XNNCopy(input_id=b.value(source, nhwc), output_id=b.output(node, nhwc), flags=0))
    else:
        b.alias(node, source)


def result_node(node: Node) -> Node:
    """The node holding the tensor a visitor produces: a multi-output op's ``getitem(op, 0)`` user, else itself."""
    if not isinstance(node.meta["val"], list | tuple):
        return node
    return next(u for u in node.users if u.target is operator.getitem and u.args[1] == 0)


@visits(operator.getitem)
def _getitem(b: XnnpackGraphBuilder, node: Node) -> None:
    """Nothing to write: the multi-output op already produced this item (see ``result_node``)."""


@visits(aten.view_copy.default, aten.squeeze_copy.dims, aten.squeeze_copy.dim, aten.unsqueeze_copy.default)
def _reshape(b: XnnpackGraphBuilder, node: Node) -> None:
    b.reshape(b.value(node.args[0]), reshape_target(node), out=b.output(node))


@visits(aten.permute_copy.default)
def _permute(b: XnnpackGraphBuilder, node: Node) -> None:
    x = node.args[0]
    rank = x.meta["val"].dim()
    perm = [p % rank for p in node.args[1]]
    nhwc = b.in_nhwc(x)
    if nhwc:
        perm = [TO_NCHW[p] for p in perm]  # read the NHWC value directly instead of transposing it back first
    b.add(xs.XNNStaticTranspose(num_dims=rank, perm=perm, input_id=b.value(x, nhwc), output_id=b.output(node), flags=0))


@visits(aten.cat.default)
def _cat(b: XnnpackGraphBuilder, node: Node) -> None:
    tensors = list(node.args[0])
    rank = node.meta["val"].dim()
    axis = (node.args[1] if len(node.args) > 1 else 0) % rank
    nhwc = rank == 4 and all(b.in_nhwc(t) or b.is_constant(t) for t in tensors) and not all(map(b.is_constant, tensors))
    if nhwc:
        axis = TO_NHWC.index(axis)
    ids = [b.value(t, nhwc) for t in tensors]
    dims = dims_of(node)
    out_dims = permuted(dims, TO_NHWC) if nhwc else dims
    kinds = {2: xs.XNNConcatenate2, 3: xs.XNNConcatenate3, 4: xs.XNNConcatenate4, 5: xs.XNNConcatenate5}
    sizes = [permuted(dims_of(t), TO_NHWC) if nhwc else dims_of(t) for t in tensors]
    while ids:
        # XNNPACK concatenates at most five tensors per node: fold longer lists five at a time.
        take, ids, sizes_taken, sizes = ids[:5], ids[5:], sizes[:5], sizes[5:]
        last = not ids
        part = list(out_dims)
        part[axis] = sum(s[axis] for s in sizes_taken)
        out = b.output(node, nhwc) if last else b.internal(part)
        if len(take) == 1:
            b.add(xs.XNNCopy(input_id=take[0], output_id=out, flags=0))
        else:
            slots = take + [xs.INVALID_VALUE_ID] * (5 - len(take))
            b.add(
                kinds[len(take)](
                    axis=axis,
                    input1_id=slots[0],
                    input2_id=slots[1],
                    input3_id=slots[2],
                    input4_id=slots[3],
                    input5_id=slots[4],
                    output_id=out,
                    flags=0,
                )
            )
        if not last:
            ids, sizes = [out, *ids], [part, *sizes]


@visits(aten.slice_copy.Tensor)
def _slice(b: XnnpackGraphBuilder, node: Node) -> None:
    x = node.args[0]
    in_dims = dims_of(x)
    dim = (node.args[1] if len(node.args) > 1 else 0) % len(in_dims)
    start = node.args[2] if len(node.args) > 2 and node.args[2] is not None else 0
    start = max(0, start + in_dims[dim] if start < 0 else min(start, in_dims[dim]))
    offsets = [0] * len(in_dims)
    offsets[dim] = start
    sizes = dims_of(node)
    b.add(
        xs.XNNStaticSlice(
            num_dims=len(in_dims),
            offsets=offsets,
            sizes=sizes,
            input_id=b.value(x),
            output_id=b.output(node),
            flags=0,
        )
    )


@visits(aten.constant_pad_nd.default)
def _constant_pad(b: XnnpackGraphBuilder, node: Node) -> None:
    x = node.args[0]
    rank = x.meta["val"].dim()
    pads = list(node.args[1])
    pre, post = [0] * rank, [0] * rank
    for i in range(len(pads) // 2):
        pre[rank - 1 - i], post[rank - 1 - i] = pads[2 * i], pads[2 * i + 1]
    value = float(node.args[2]) if len(node.args) > 2 else 0.0
    nhwc = rank == 4 and b.in_nhwc(x)
    if nhwc:
        pre, post = permuted(pre, TO_NHWC), permuted(post, TO_NHWC)
    b.add(
        xs.XNNStaticConstantPad(
            pre_paddings=pre,
            post_paddings=post,
            padding_value=value,
            input_id=b.value(x, nhwc),
            output_id=b.output(node, nhwc),
            flags=0,
        )
    )


# ------------------------------------------------------------------- matmuls


@visits(aten.linear.default)
def _linear(b: XnnpackGraphBuilder, node: Node) -> None:
    x, weight = node.args[:2]
    bias = node.args[2] if len(node.args) > 2 else None
    bias_id = xs.INVALID_VALUE_ID if bias is None else b.value(bias)
    b.add(
        xs.XNNFullyConnected(
            input1_id=b.value(x), filter_id=b.value(weight), bias_id=bias_id, output_id=b.output(node), flags=0
        )
    )


@visits(aten.addmm.default, aten.mm.default)
def _addmm(b: XnnpackGraphBuilder, node: Node) -> None:
    # addmm's weight is [in, out]: XNNPACK reads it as is with the transposed-weights flag.
    bias, x, weight = node.args if to_aten(node.target) == aten.addmm.default else (None, *node.args)
    bias_id = xs.INVALID_VALUE_ID if bias is None else b.value(bias)
    b.add(
        xs.XNNFullyConnected(
            input1_id=b.value(x),
            filter_id=b.value(weight),
            bias_id=bias_id,
            output_id=b.output(node),
            flags=xs.FLAG_TRANSPOSE_WEIGHTS,
        )
    )


@visits(aten.bmm.default)
def _bmm(b: XnnpackGraphBuilder, node: Node) -> None:
    lhs, rhs = node.args
    b.add(xs.XNNBatchMatrixMultiply(input1_id=b.value(lhs), input2_id=b.value(rhs), output_id=b.output(node), flags=0))


@visits(aten.scaled_dot_product_attention.default)
def _attention(b: XnnpackGraphBuilder, node: Node) -> None:
    """softmax(q k^T * scale + mask) v as XNNPACK batch matmuls, a scaled query and a softmax."""
    q, k, v = node.args[:3]
    mask = node.args[3] if len(node.args) > 3 else node.kwargs.get("attn_mask")
    causal = node.args[5] if len(node.args) > 5 else node.kwargs.get("is_causal", False)
    scale = node.kwargs.get("scale") or (node.args[6] if len(node.args) > 6 else None)
    q_dims, k_dims = dims_of(q), dims_of(k)
    scale = scale if scale is not None else 1.0 / math.sqrt(q_dims[-1])
    scaled = b.internal(q_dims)
    b.add(xs.XNNMultiply(input1_id=b.value(q), input2_id=b.scalar(scale), output_id=scaled, flags=0))
    score_dims = [*q_dims[:-1], k_dims[-2]]
    scores = b.internal(score_dims)
    b.add(
        xs.XNNBatchMatrixMultiply(input1_id=scaled, input2_id=b.value(k), output_id=scores, flags=xs.FLAG_TRANSPOSE_B)
    )
    if causal:
        length, keys = q_dims[-2], k_dims[-2]
        mask_id = b.constant(torch.full((length, keys), -math.inf).triu(1))
    else:
        mask_id = None if mask is None else b.value(mask)
    if mask_id is not None:
        masked = b.internal(score_dims)
        b.add(xs.XNNAdd(input1_id=scores, input2_id=mask_id, output_id=masked, flags=0))
        scores = masked
    probabilities = b.internal(score_dims)
    b.add(xs.XNNSoftmax(input_id=scores, output_id=probabilities, flags=0))
    b.add(xs.XNNBatchMatrixMultiply(input1_id=probabilities, input2_id=b.value(v), output_id=b.output(node), flags=0))


# -------------------------------------------------------------- convolutions


def conv_filter(weight: torch.Tensor, transposed: bool, groups: int) -> tuple[torch.Tensor, bool]:
    """The 4-d filter in XNNPACK's layout, and whether the conv is depthwise."""
    depthwise = not transposed and weight.shape[1] == 1 and groups > 1
    if transposed:
        # [in, out/g, kh, kw] -> [out, in/g, kh, kw], group by group.
        cin, cout_g = weight.shape[:2]
        weight = weight.reshape(groups, cin // groups, cout_g, *weight.shape[2:]).transpose(1, 2)
        weight = weight.reshape(cout_g * groups, cin // groups, *weight.shape[3:])
    elif depthwise:
        weight = weight.transpose(0, 1)  # [out, 1, kh, kw] -> [1, out, kh, kw]
    return weight.permute(TO_NHWC).contiguous(), depthwise


def pair(value: Any) -> list[int]:
    values = list(value) if isinstance(value, list | tuple) else [value]
    return values * 2 if len(values) == 1 else values


@visits(aten.convolution.default)
def _convolution(b: XnnpackGraphBuilder, node: Node) -> None:
    x, weight_node, bias_node, stride, padding, dilation, transposed, output_padding, groups = node.args
    weight, bias = b.overrides.get(node, (b.tensor(weight_node), None if bias_node is None else b.tensor(bias_node)))
    one_d = weight.dim() == 3
    if one_d:
        weight = weight.unsqueeze(2)
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
        output_padding = [0, *output_padding]
    stride, padding, dilation, output_padding = map(pair, (stride, padding, dilation, output_padding))
    filt, depthwise = conv_filter(weight, transposed, groups)
    if transposed:
        group_in, group_out = weight.shape[0] // groups, weight.shape[1]
    else:
        group_in, group_out = weight.shape[1], weight.shape[0] // groups
    kind = xs.XNNDepthwiseConv2d if depthwise else xs.XNNConvTranspose2d if transposed else xs.XNNConv2d
    input_id, output_id = _conv_io(b, node, one_d)
    b.add(
        kind(
            padding_top=padding[0],
            padding_right=padding[1],
            padding_bottom=padding[0],
            padding_left=padding[1],
            kernel_height=weight.shape[2],
            kernel_width=weight.shape[3],
            subsampling_height=stride[0],
            subsampling_width=stride[1],
            dilation_height=dilation[0],
            dilation_width=dilation[1],
            group_input_channels=group_in,
            group_output_channels=group_out,
            groups=groups,
            adjustment_height=output_padding[0],
            adjustment_width=output_padding[1],
            input1_id=input_id,
            filter_id=b.constant(filt, b.external_tag(weight_node)),
            bias_id=xs.INVALID_VALUE_ID if bias is None else b.constant(bias, b.external_tag(bias_node or weight_node)),
            output_id=output_id,
            flags=0,
        )
    )
    if one_d:
        _finish_conv1d(b, node, output_id)


def _conv_io(b: XnnpackGraphBuilder, node: Node, one_d: bool) -> tuple[int, int]:
    """NHWC input and output values of a convolution; a 1-d one runs as a 2-d one of height 1."""
    if not one_d:
        return b.value(node.args[0], True), b.output(node, True)
    x = node.args[0]
    n, c, length = dims_of(x)
    shape = reshape_target(x)
    nchw = b.reshape(b.value(x), [shape[0], shape[1], 1, shape[2]])
    nhwc = b.transpose(nchw, TO_NHWC, [n, c, 1, length])
    n, c, length = dims_of(node)
    return nhwc, b.internal([n, 1, length, c])


def _finish_conv1d(b: XnnpackGraphBuilder, node: Node, nhwc: int) -> None:
    n, c, length = dims_of(node)
    nchw = b.transpose(nhwc, TO_NCHW, [n, 1, length, c])
    b.reshape(nchw, reshape_target(node), out=b.output(node))


# ------------------------------------------------------------------- pooling


def pool_args(node: Node) -> tuple[list[int], list[int], list[int], list[int], bool]:
    """kernel, stride, padding, dilation and ceil_mode of a max/avg pool node."""
    args = list(node.args) + [None] * 6
    kernel = pair(args[1])
    stride = pair(args[2]) if args[2] else kernel
    padding = pair(args[3] if args[3] is not None else 0)
    is_max = "max_pool" in str(to_aten(node.target))
    dilation = pair(args[4] if is_max and args[4] is not None else 1)
    ceil = bool(args[5] if is_max else args[4])
    return kernel, stride, padding, dilation, ceil


def ceil_extra(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """Extra bottom/right padding that makes floor-mode pooling produce ceil-mode's output size."""
    span = dilation * (kernel - 1) + 1
    out = -(-(size + 2 * pad - span) // stride) + 1
    if (out - 1) * stride >= size + pad:
        out -= 1  # the last window must start inside the input or the left padding
    return max(0, (out - 1) * stride + span - size - 2 * pad)


@visits(aten.max_pool2d.default, aten.max_pool2d_with_indices.default)
def _max_pool(b: XnnpackGraphBuilder, node: Node) -> None:
    kernel, stride, padding, dilation, ceil = pool_args(node)
    h, w = dims_of(node.args[0])[2:]
    sizes = zip((h, w), kernel, stride, padding, dilation)
    extra = [ceil_extra(*size) for size in sizes] if ceil else [0, 0]
    _pooling(b, node, xs.XNNMaxPooling2d, kernel, stride, padding, dilation, extra)


def _pooling(
    b: XnnpackGraphBuilder,
    node: Node,
    kind: type,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int] = (1, 1),
    extra: Sequence[int] = (0, 0),
) -> None:
    """A 2-d pooling node; ``extra`` pads the bottom and right edges beyond ``padding``."""
    b.add(
        kind(
            padding_top=padding[0],
            padding_right=padding[1] + extra[1],
            padding_bottom=padding[0] + extra[0],
            padding_left=padding[1],
            pooling_height=kernel[0],
            pooling_width=kernel[1],
            stride_height=stride[0],
            stride_width=stride[1],
            dilation_height=dilation[0],
            dilation_width=dilation[1],
            input_id=b.value(node.args[0], True),
            output_id=b.output(result_node(node), True),
            flags=xs.FLAG_KEEP_DIMS,
        )
    )


@visits(aten.avg_pool2d.default)
def _avg_pool(b: XnnpackGraphBuilder, node: Node) -> None:
    kernel, stride, padding, _, _ = pool_args(node)
    _pooling(b, node, xs.XNNAvgPooling2d, kernel, stride, padding)


@visits(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(b: XnnpackGraphBuilder, node: Node) -> None:
    h, w = dims_of(node.args[0])[2:]
    oh, ow = pair(node.args[1])
    if (oh, ow) == (1, 1):
        _global_avg_pool(b, node, node.args[0])
        return
    kernel = [h // oh, w // ow]
    _pooling(b, node, xs.XNNAvgPooling2d, kernel, kernel, [0, 0])


def _global_avg_pool(b: XnnpackGraphBuilder, node: Node, x: Node) -> None:
    keep = node.meta["val"].dim() == 4
    out = b.output(node, True) if keep else b.internal(permuted(dims_of(x)[:2] + [1, 1], TO_NHWC))
    b.add(xs.XNNGlobalAvgPooling2d(input_id=b.value(x, True), output_id=out, flags=xs.FLAG_KEEP_DIMS))
    if not keep:
        # [N, 1, 1, C] channels-last holds the same bytes as [N, C].
        b.reshape(out, reshape_target(node), out=b.output(node))


@visits(aten.mean.dim)
def _mean(b: XnnpackGraphBuilder, node: Node) -> None:
    _global_avg_pool(b, node, node.args[0])


@visits(aten.upsample_bilinear2d.vec)
def _upsample_bilinear(b: XnnpackGraphBuilder, node: Node) -> None:
    height, width = dims_of(node)[2:]
    align = bool(node.args[2])
    b.add(
        xs.XNNStaticResizeBilinear2D(
            new_height=height,
            new_width=width,
            input_id=b.value(node.args[0], True),
            output_id=b.output(node, True),
            flags=xs.FLAG_ALIGN_CORNERS if align else 0,
        )
    )


@visits(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(b: XnnpackGraphBuilder, node: Node) -> None:
    """A batch norm not folded into a convolution: x * scale + shift with per-channel constants."""
    x, weight, bias, mean, var = node.args[:5]
    eps = float(node.args[6])
    rank = x.meta["val"].dim()
    scale = torch.rsqrt(b.tensor(var) + eps) * (b.tensor(weight) if weight is not None else 1.0)
    shift = (b.tensor(bias) if bias is not None else 0.0) - b.tensor(mean) * scale
    shape = [1, -1] + [1] * (rank - 2)
    nhwc = rank == 4 and b.in_nhwc(x)
    layout = TO_NHWC if nhwc else range(rank)
    tag = b.external_tag(*node.args[1:5])
    scale_id = b.constant(scale.reshape(shape).permute(*layout), tag)
    shift_id = b.constant(shift.reshape(shape).permute(*layout), tag)
    result = result_node(node)
    dims = dims_of(result)
    scaled = b.internal(permuted(dims, TO_NHWC) if nhwc else dims)
    b.add(xs.XNNMultiply(input1_id=b.value(x, nhwc), input2_id=scale_id, output_id=scaled, flags=0))
    b.add(xs.XNNAdd(input1_id=scaled, input2_id=shift_id, output_id=b.output(result, nhwc), flags=0))
