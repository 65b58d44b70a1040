"""Edge graph -> ``XNNGraph``: the graph builder that writes values, constants and nodes, and the blob.

The node visitors, which say what each Edge op becomes, are in ``operators/``.

Convolutions, pooling, global average pooling, bilinear resize and PReLU work
on channels-last (NHWC) tensors inside the graph. Every 4-d value is kept in the
layout its producer made it in; a consumer that needs the other layout gets a
transpose, made once per value. Element-wise ops run in whichever layout their
input has, so a conv -> relu -> pool chain never leaves NHWC. The delegate's
inputs and outputs are contiguous (NCHW). Constant tensors are written in the
layout each use asks for, as named data of the program (or of its ``.ptd``).
An activation ``FuseActivationPass`` folded into its producer becomes that node's output clamp.
Nodes whose inputs are all constants are evaluated here with torch and become
constants. Quantized values (QS8, QD8, QC8, QB4) and the q/dq ops they come from
are planned by ``operators.quant.plan_quantization`` before any node is visited.
A float16 node writes float16 values and constants (XNNPACK's fp16 datatype), as ExecuTorch does.
Every graph passes ``validate.validate_graph`` before it is written.

May import torch and edgetorch.exir.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack._passes.fuse_activation_pass import FUSED_ACTIVATION_TAG
from edgetorch.backends.xnnpack.blob import CONSTANT_ALIGNMENT, build_blob
from edgetorch.backends.xnnpack.operators import VISITORS, XnnpackLoweringError
from edgetorch.backends.xnnpack.operators.node_visitor import TO_NCHW, TO_NHWC, Node, dims_of, permuted
from edgetorch.backends.xnnpack.operators.quant import QuantSpec, plan_quantization
from edgetorch.backends.xnnpack.validate import validate_graph
from edgetorch.exir.backend.lowered_backend_module import user_inputs, user_outputs
from edgetorch.exir.backend.utils import DelegateMappingBuilder
from edgetorch.exir.dialects import to_aten
from edgetorch.exir.dialects.dim_order_ops import ensure_registered
from edgetorch.exir.named_data_store import NamedDataStore

__all__ = ["XnnpackGraphBuilder", "VISITORS", "XnnpackLoweringError"]

ensure_registered()
aten = torch.ops.aten

DEFAULT_DEBUG_HANDLE = 65535
CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


FLOAT_DATATYPES = {torch.float32: xs.XNNDatatype.xnn_datatype_fp32, torch.float16: xs.XNNDatatype.xnn_datatype_fp16}


def float_datatype(node: Node) -> xs.XNNDatatype:
    """The XNNPACK datatype of the float values written for ``node``: fp16 for a float16 node, else fp32."""
    val = node.meta.get("val")
    if isinstance(val, list | tuple):
        val = val[0] if val else None
    fp16 = isinstance(val, torch.Tensor) and val.dtype == torch.float16
    return xs.XNNDatatype.xnn_datatype_fp16 if fp16 else xs.XNNDatatype.xnn_datatype_fp32


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
        self.qspec: dict[Node, QuantSpec] = {}
        plan_quantization(self)
        self.debug = DelegateMappingBuilder()
        self._float = xs.XNNDatatype.xnn_datatype_fp32
        """The datatype of float values being defined: the float16 or float32 of the node being written."""
        self._debug_handle = DEFAULT_DEBUG_HANDLE

    # ------------------------------------------------------------------ driver

    def build(self) -> tuple[bytes, dict]:
        """The blob bytes and the debug handle map (XNNPACK node debug handle -> Edge debug handles)."""
        for node in self.inputs:
            if node.meta["val"].dtype not in FLOAT_DATATYPES:
                raise XnnpackLoweringError(
                    f"input {node.name} is {node.meta['val'].dtype}; XNNPACK lowers float32 and float16 inputs"
                )
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
        self._float = float_datatype(node)
        handle = node.meta.get("debug_handle")
        self._debug_handle = DEFAULT_DEBUG_HANDLE if handle is None else int(handle)
        first = len(self.graph.xnodes)
        visitor(self, node)
        clamp = self.fused_clamp(node)
        if clamp is not None and all(x.output_min_max is None for x in self.graph.xnodes[first:]):
            self.graph.xnodes[-1].output_min_max = xs.OutputMinMax(*clamp)
        if handle is not None and self._debug_handle not in self.debug.get_delegate_mapping():
            self.debug.insert_delegate_mapping_entry(handles=[handle], identifier=self._debug_handle)

    @staticmethod
    def fused_clamp(node: Node) -> tuple[float, float] | None:
        """The (min, max) of the activation ``FuseActivationPass`` folded into ``node``, or None.

        It goes on the XNNPACK node that computes ``node``: the last one its visitor adds, unless the
        visitor placed it itself (a 1-d convolution ends with a reshape, which has no clamp).
        """
        fused = node.meta.get(FUSED_ACTIVATION_TAG)
        return None if fused is None else (float(fused.output_min), float(fused.output_max))

    def _emit_output(self, node: Node) -> None:
        """Make sure ``node``'s external output value is written (by a transpose or copy if nothing wrote it)."""
        source = self.aliases.get(node, node)
        if source in self.qspec:
            # A quantized value leaves the graph as float32, converted in the default layout.
            value = self.value(source)
            self.add(xs.XNNConvert(input_id=value, output_id=self._external_output(node), flags=0))
            return
        if (node, False) in self.ids:
            return
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
        """A new static value holding ``tensor`` (as float32, or float16 in a float16 node), stored as named data keyed by the SHA-256 of its
        bytes: in the program, or with an ``external_tag`` in ``<external_tag>.ptd``.

        Never in the blob's own constant segment: ExecuTorch's XNNPACK runtime frees the blob once it has
        compiled it, while XNNPACK keeps pointing at the static operands of element-wise nodes (a scale, a
        mask) and reads them at every run; named data stays mapped for the life of the program.
        """
        dtype = torch.float16 if self._float == xs.XNNDatatype.xnn_datatype_fp16 else torch.float32
        data = tensor.detach().to(dtype).contiguous()
        index = self._named_constant(data.numpy().tobytes(), external_tag)
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

    def quantized_constant(
        self,
        data: torch.Tensor,
        datatype: xs.XNNDatatype,
        scale: torch.Tensor | float,
        channel_dim: int,
        external_tag: str | None = None,
        group_size: int = 0,
        dims: Sequence[int] | None = None,
    ) -> int:
        """A new static value holding the integers ``data`` quantized per channel along ``channel_dim`` with
        ``scale``: the integers as named data keyed by their SHA-256, the float32 scales under ``scale_`` and the
        SHA-256 of theirs, each with its own ``constant_data`` entry (the scales' named by ``scale_buffer_idx``).
        A float ``scale`` quantizes the whole tensor (zero point 0): it is stored in the value itself."""
        if not bool(torch.isfinite(torch.as_tensor(scale)).all() and (torch.as_tensor(scale) > 0).all()):
            raise XnnpackLoweringError(f"quantization scales must be finite and positive; found {scale}")
        index = self._named_constant(data.contiguous().numpy().tobytes(), external_tag)
        if isinstance(scale, float):
            quant = QuantSpec(datatype, xs.PerTensorQuant(scale=scale, zero_point=0))
            return self._define(list(data.shape) if dims is None else list(dims), constant_index=index, quant=quant)
        if group_size:
            # Blockwise scales are bfloat16 in XNNPACK, as ExecuTorch stores them (rounded to nearest even).
            raw = scale.detach().to(torch.bfloat16).contiguous().view(torch.int16).numpy().tobytes()
        else:
            raw = scale.detach().to(torch.float32).contiguous().numpy().tobytes()
        scale_index = self._named_constant(raw, external_tag, prefix="scale_")
        params: Any = xs.PerChannelQuant(
            scale=[], channel_dim=channel_dim, scale_buffer_idx=scale_index, num_scales=scale.numel()
        )
        if group_size:
            params = xs.PerChannelGroupQuant(
                scale=[], channel_dim=channel_dim, group_size=group_size, scale_buffer_idx=scale_index,
                num_scales=scale.numel(),
            )  # fmt: skip
        shape = list(data.shape) if dims is None else list(dims)
        return self._define(shape, constant_index=index, quant=QuantSpec(datatype, params))

    def _named_constant(self, raw: bytes, external_tag: str | None, prefix: str = "") -> int:
        """A ``constant_data`` entry for ``raw``, stored as named data under its SHA-256 (after ``prefix``)."""
        key = prefix + hashlib.sha256(raw).hexdigest()
        self.named_data.add_named_data(key, raw, CONSTANT_ALIGNMENT, external_tag)
        self.graph.constant_data.append(
            xs.ConstantDataOffset(offset=xs.NAMED_CONSTANT_OFFSET, size=len(raw), named_key=key)
        )
        return len(self.graph.constant_data) - 1

    def _define(
        self,
        dims: Sequence[int],
        constant_index: int = 0,
        external: int | None = None,
        flag: int = 0,
        quant: QuantSpec | None = None,
    ) -> int:
        vid = len(self.graph.xvalues)
        value = xs.XNNTensorValue(
            datatype=self._float if quant is None else quant.datatype,
            num_dims=len(dims),
            dims=[int(d) for d in dims],
            constant_buffer_idx=constant_index,
            external_id=xs.INVALID_VALUE_ID if external is None else external,
            flags=flag,
            id_out=vid,
        )
        if quant is not None:
            value = xs.XNNQuantizedTensorValue(tensor_value=value, quant_params=quant.params)
        self.graph.xvalues.append(xs.XValue(value))
        if flag == xs.VALUE_FLAG_EXTERNAL_INPUT:
            self.graph.input_ids.append(vid)
        elif flag == xs.VALUE_FLAG_EXTERNAL_OUTPUT:
            self.graph.output_ids.append(vid)
        return vid

    def internal(self, dims: Sequence[int], quant: QuantSpec | None = None) -> int:
        """A new value computed inside the graph."""
        return self._define(dims, quant=quant)

    def _external_output(self, node: Node) -> int:
        self._float = float_datatype(node)
        vid = self._define(dims_of(node), external=self.external[node], flag=xs.VALUE_FLAG_EXTERNAL_OUTPUT)
        self.ids[node, False] = vid
        return vid

    def _new_value(self, node: Node, nhwc: bool) -> int:
        self._float = float_datatype(node)
        if node in self.inputs and not nhwc:
            vid = self._define(dims_of(node), external=self.external[node], flag=xs.VALUE_FLAG_EXTERNAL_INPUT)
        elif node in self.outputs and not nhwc and node not in self.qspec:
            return self._external_output(node)
        else:
            dims = dims_of(node)
            vid = self.internal(permuted(dims, TO_NHWC) if nhwc else dims, self.qspec.get(node))
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
