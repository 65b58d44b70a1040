"""Visitors of convolutions (1-d and 2-d, depthwise, transposed) on channels-last values. May import torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.operators.node_visitor import (
    TO_NCHW,
    TO_NHWC,
    Node,
    aten,
    dims_of,
    pair,
    reshape_target,
    visits,
)
from edgetorch.backends.xnnpack.operators.quant import (
    is_quantized_gemm,
    quantized_bias,
    weight_datatype,
    weight_parts,
)

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder


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


@visits(aten.convolution.default)
def _convolution(b: XnnpackGraphBuilder, node: Node) -> None:
    x, weight_node, bias_node, stride, padding, dilation, transposed, output_padding, groups = node.args
    quantized = is_quantized_gemm(b, node)
    if quantized:
        weight, scale, _ = weight_parts(b, weight_node)
        bias = None
    else:
        weight, bias = b.overrides.get(
            node, (b.tensor(weight_node), None if bias_node is None else b.tensor(bias_node))
        )
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
    if quantized:
        # Output channels are the filter's first dimension, or its last for a depthwise one.
        axis = 3 if depthwise else 0
        filter_id = b.quantized_constant(filt, weight_datatype(weight_node), scale, axis, b.external_tag(weight_node))
        bias_id = quantized_bias(b, bias_node, x, scale)
    else:
        filter_id = b.constant(filt, b.external_tag(weight_node))
        bias_id = xs.INVALID_VALUE_ID if bias is None else b.constant(bias, b.external_tag(bias_node or weight_node))
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
            filter_id=filter_id,
            bias_id=bias_id,
            output_id=output_id,
            flags=0,
        ),
        clamp=b.fused_clamp(node),
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
