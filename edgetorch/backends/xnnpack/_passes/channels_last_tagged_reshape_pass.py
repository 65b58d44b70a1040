"""``ChannelsLastTaggedReshapePass``: mark where an Edge graph changes between NCHW and NHWC (channels-last).

XNNPACK's convolutions, pooling, bilinear resize, PReLU and spatial reductions work on NHWC tensors; its
linear, view and squeeze/unsqueeze nodes on the logical (NCHW) layout; element-wise ops on whatever
layout their inputs share. The pass walks the graph once, tags every 4-d value with the layout it is
produced in (``meta[XNN_NHWC_NODE]``) and, where a consumer needs the other layout, inserts an
``_to_copy(x, memory_format=...)`` node: ``channels_last`` into NHWC, ``contiguous_format`` back. Each
value is converted at most once per direction: a copy is remembered as the value's partner and reused.
Graph outputs leave in the layout of the example output (NCHW unless the model returned channels-last).

Quantized values keep their q/dq structure around a copy: after a dequantize the copy is followed by a new
quantize/dequantize pair with the same parameters (all marked implicit), and before a quantize the copy
is wrapped in a dequantize/quantize pair. A dynamically quantized value is converted at its float source,
so the run-time quantization (choose_qparams, quantize, dequantize) already reads NHWC.

This is the graph form of what ``backends.xnnpack.serialize`` decides while it writes a blob (the layout
each value is kept in and the transposes between); the lowering does not run the pass. Imports torch.
"""

from __future__ import annotations

from typing import Any

import torch

from edgetorch.backends.xnnpack._passes.xnnpack_pass import XNNPACKPass
from edgetorch.backends.xnnpack.operators import XnnpackLoweringError
from edgetorch.backends.xnnpack.utils.quant_utils import (
    is_dequant,
    is_dynamic_qdq,
    is_tagged_as_implicit_q_dq,
    tag_as_implicit_q_dq,
)
from edgetorch.backends.xnnpack.utils.utils import is_param_node
from edgetorch.exir.dialects import exir_ops, to_aten
from edgetorch.exir.pass_base import PassResult

__all__ = ["ChannelsLastTaggedReshapePass"]

aten = torch.ops.aten
Node = torch.fx.Node


class ChannelsLastTaggedReshapePass(XNNPACKPass):
    """Tags each 4-d value NHWC or NCHW and inserts tagged ``_to_copy`` nodes where a consumer needs the other."""

    memory_sensitive_ops_nhwc = {
        aten.convolution.default,
        aten.upsample_bilinear2d.vec,
        aten.mean.dim,
        aten.max_pool2d.default,
        aten.amax.default,
        aten.max.dim,
        aten.avg_pool2d.default,
        aten.prelu.default,
    }
    """Ops whose first input must be NHWC; their output is NHWC."""
    memory_sensitive_ops_nchw = {aten.squeeze_copy.dim, aten.unsqueeze_copy.default, aten.linear.default}
    """Ops (with ``view_copy``) all of whose inputs must be NCHW."""

    XNN_NHWC_NODE = "XNN_NHWC_NODE"
    PARTNER_NODE = "XNN_CHANNELS_LAST_TAGGED_RESHAPE_PARTNER_NODE"

    # ------------------------------------------------------------------ tags

    @staticmethod
    def mark_as_nhwc_node(node: Node) -> None:
        node.meta[ChannelsLastTaggedReshapePass.XNN_NHWC_NODE] = True

    @staticmethod
    def mark_as_nchw_node(node: Node) -> None:
        node.meta[ChannelsLastTaggedReshapePass.XNN_NHWC_NODE] = False

    @staticmethod
    def _is_nhwc_tensor(tensor: Any) -> bool:
        """Channels-last and not also contiguous (a tensor with C == 1 or H == W == 1 is both: NCHW)."""
        if not isinstance(tensor, torch.Tensor) or tensor.dim() != 4:
            return False
        return tensor.is_contiguous(memory_format=torch.channels_last) and not tensor.is_contiguous()

    @staticmethod
    def is_nhwc_node(node: Node) -> bool:
        """Whether ``node``'s value is NHWC; a dequantize of a quantize has the layout of the value quantized."""
        if is_dequant(node) and isinstance(node.args[0], Node) and node.args[0].all_input_nodes:
            source = node.args[0].args[0]
            if isinstance(source, Node) and source.op == "placeholder":
                return ChannelsLastTaggedReshapePass._is_nhwc_tensor(source.meta.get("val"))
            return bool(isinstance(source, Node) and source.meta.get(ChannelsLastTaggedReshapePass.XNN_NHWC_NODE))
        return bool(node.meta.get(ChannelsLastTaggedReshapePass.XNN_NHWC_NODE, False))

    @staticmethod
    def is_nchw_node(node: Node) -> bool:
        return not ChannelsLastTaggedReshapePass.is_nhwc_node(node)

    def _in_nhwc(self, node: Node) -> bool:
        """The layout ``node`` is in now: a graph input's from its example value, any other node's from its tag."""
        if node.op == "placeholder":
            return self._is_nhwc_tensor(node.meta.get("val"))
        return self.is_nhwc_node(node)

    # ----------------------------------------------------------- requirements

    def requires_nhwc_input(self, node: Node) -> bool:
        return to_aten(node.target) in self.memory_sensitive_ops_nhwc

    def requires_nchw_inputs(self, node: Node) -> bool:
        return to_aten(node.target) in self.memory_sensitive_ops_nchw | {aten.view_copy.default}

    def can_be_converted_to_nhwc(self, node: Node) -> bool:
        """A 4-d value, unless it is a constant already used in NCHW somewhere."""
        val = node.meta.get("val")
        is_4d = isinstance(val, torch.Tensor) and val.dim() == 4
        used_as_nchw = self.XNN_NHWC_NODE in node.meta and self.is_nchw_node(node)
        return is_4d and not (is_param_node(self.exported_program, node) and used_as_nchw)

    # ------------------------------------------------------------ conversion

    def input_to_nhwc(self, graph_module: torch.fx.GraphModule, input_node: Node, target_node: Node) -> None:
        """Make ``target_node`` read ``input_node`` in NHWC."""
        self._convert(graph_module, input_node, target_node, nhwc=True)

    def input_to_nchw(self, graph_module: torch.fx.GraphModule, input_node: Node, target_node: Node) -> None:
        """Make ``target_node`` read ``input_node`` in NCHW."""
        self._convert(graph_module, input_node, target_node, nhwc=False)

    def _convert(self, graph_module: torch.fx.GraphModule, value: Node, user: Node, nhwc: bool) -> None:
        if self.exported_program is not None and is_param_node(self.exported_program, value):
            # A constant is written in one layout: it cannot serve NHWC and NCHW readers both.
            if self.XNN_NHWC_NODE in value.meta and self.is_nhwc_node(value) != nhwc:
                raise XnnpackLoweringError(
                    f"constant {value.name} is read in NCHW by one node and in NHWC by another; XNNPACK keeps a "
                    "constant in one layout, so give the second reader its own copy of the tensor"
                )
            value.meta[self.XNN_NHWC_NODE] = nhwc
        if self._in_nhwc(value) == nhwc:
            return
        if nhwc and not self.can_be_converted_to_nhwc(value):
            raise XnnpackLoweringError(
                f"{value.format_node()} must be NHWC for {user.format_node()} but is not a 4-d value that can be; "
                "only 4-d tensors have a channels-last layout"
            )
        copy = value.meta.get(self.PARTNER_NODE)
        if copy is None and is_dynamic_qdq(value):
            self._convert_dynamic_source(graph_module, value, nhwc)
            return
        if copy is None:
            copy = self._copy_after(graph_module, value, nhwc)
        self._wire(graph_module, value, user, copy)

    def _copy_after(self, graph_module: torch.fx.GraphModule, value: Node, nhwc: bool) -> Node:
        memory_format = torch.channels_last if nhwc else torch.contiguous_format
        with graph_module.graph.inserting_after(value):
            copy = graph_module.graph.call_function(
                exir_ops.edge.aten._to_copy.default, (value,), {"memory_format": memory_format}
            )
        copy.meta = {k: v for k, v in value.meta.items() if k not in (self.PARTNER_NODE, self.XNN_NHWC_NODE)}
        val = value.meta.get("val")
        if isinstance(val, torch.Tensor):
            copy.meta["val"] = val.clone(memory_format=memory_format)
        copy.meta[self.XNN_NHWC_NODE] = nhwc
        return copy

    def _convert_dynamic_source(self, graph_module: torch.fx.GraphModule, dq: Node, nhwc: bool) -> None:
        """Convert the float value a dynamic q/dq chain quantizes; the chain (choose_qparams, quantize) reads
        the copy, so its dequantize is in the new layout."""
        quantize = dq.args[0] if is_dequant(dq) else dq
        source = quantize.args[0]
        copy = source.meta.get(self.PARTNER_NODE) or self._copy_after(graph_module, source, nhwc)
        chain = [quantize, *(param.args[0] for param in quantize.args[1:3])]
        for node in chain:
            node.replace_input_with(source, copy)
        self._make_partners(source, copy)
        for node in (quantize, dq):
            node.meta[self.XNN_NHWC_NODE] = nhwc

    def _wire(self, graph_module: torch.fx.GraphModule, value: Node, user: Node, copy: Node) -> None:
        """Route ``user`` (or, after a dequantize, every reader) through ``copy``, keeping q/dq pairs whole."""
        if self._is_static_per_tensor(value, dequantize=True):
            # dq -> copy -> q -> dq: the copy moves quantized values, as XNNPACK will.
            params = tuple(value.args[1:])
            q = self._insert(graph_module, copy, exir_ops.edge.quantized_decomposed.quantize_per_tensor.default, params)
            dq = self._insert(graph_module, q, exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default, params)
            tag_as_implicit_q_dq(q)
            if is_tagged_as_implicit_q_dq(value):
                tag_as_implicit_q_dq(dq)
            tag_as_implicit_q_dq(value)
            value.replace_all_uses_with(dq)
            copy.replace_input_with(dq, value)
        elif self._is_static_per_tensor(value, dequantize=False):
            # q -> dq -> copy -> q: the reader still gets a quantized value.
            params = tuple(value.args[1:])
            dq = self._insert(
                graph_module, value, exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default, params
            )
            q = self._insert(graph_module, copy, exir_ops.edge.quantized_decomposed.quantize_per_tensor.default, params)
            tag_as_implicit_q_dq(dq)
            tag_as_implicit_q_dq(q)
            copy.replace_input_with(value, dq)
            user.replace_input_with(value, q)
        else:
            user.replace_input_with(value, copy)
            self._make_partners(value, copy)

    @staticmethod
    def _is_static_per_tensor(node: Node, dequantize: bool) -> bool:
        op = (
            exir_ops.edge.quantized_decomposed.dequantize_per_tensor.default
            if dequantize
            else exir_ops.edge.quantized_decomposed.quantize_per_tensor.default
        )
        return node.op == "call_function" and to_aten(node.target) == to_aten(op)

    @staticmethod
    def _insert(graph_module: torch.fx.GraphModule, after: Node, op: Any, params: tuple) -> Node:
        with graph_module.graph.inserting_after(after):
            node = graph_module.graph.call_function(op, (after, *params))
        node.meta = dict(after.meta)
        val = after.meta.get("val")
        if isinstance(val, torch.Tensor):
            dtype = params[-1] if "quantize_per_tensor" in str(op) and "dequantize" not in str(op) else torch.float32
            node.meta["val"] = val.to(dtype)
        return node

    def _make_partners(self, a: Node, b: Node) -> None:
        a.meta[self.PARTNER_NODE] = b
        b.meta[self.PARTNER_NODE] = a

    # ------------------------------------------------------------------ pass

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for node in list(graph_module.graph.nodes):
            if not node.all_input_nodes:
                val = node.meta.get("val")
                if isinstance(val, torch.Tensor) and val.dim() == 4:
                    node.meta[self.XNN_NHWC_NODE] = self._is_nhwc_tensor(val)
            elif node.op == "output":
                for out in node.args[0]:
                    if isinstance(out, Node):
                        self._convert(graph_module, out, node, nhwc=self._is_nhwc_tensor(out.meta.get("val")))
            elif node.op != "call_function":
                continue
            elif self.requires_nhwc_input(node):
                first = node.args[0]
                for value in first if isinstance(first, list | tuple) else [first]:
                    if isinstance(value, Node):
                        self.input_to_nhwc(graph_module, value, node)
                self.mark_as_nhwc_node(node)
            elif self.requires_nchw_inputs(node):
                for value in node.all_input_nodes:
                    self.input_to_nchw(graph_module, value, node)
            elif to_aten(node.target) == aten._to_copy.default and "memory_format" in node.kwargs:
                node.meta[self.XNN_NHWC_NODE] = node.kwargs["memory_format"] == torch.channels_last
            else:
                self._agree(graph_module, node)
        for node in graph_module.graph.nodes:
            node.meta.pop(self.PARTNER_NODE, None)
        graph_module.recompile()
        return PassResult(graph_module, True)

    def _agree(self, graph_module: torch.fx.GraphModule, node: Node) -> None:
        """A layout-free op: NHWC if all its inputs are; with mixed inputs, all NHWC if they can be, else NCHW."""
        inputs = node.all_input_nodes
        layouts = [self.is_nhwc_node(value) for value in inputs]
        if all(layouts):
            self.mark_as_nhwc_node(node)
        elif any(layouts):
            nhwc = all(self.can_be_converted_to_nhwc(value) for value in inputs)
            for value in inputs:
                self._convert(graph_module, value, node, nhwc)
            if nhwc:
                self.mark_as_nhwc_node(node)
