"""Visitors of pooling, mean, bilinear upsampling and batch norm (not folded into a convolution). May import torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.operators.node_visitor import (
    TO_NHWC,
    Node,
    aten,
    dims_of,
    pair,
    permuted,
    reshape_target,
    result_node,
    visits,
)
from edgetorch.exir.dialects import to_aten

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder


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
