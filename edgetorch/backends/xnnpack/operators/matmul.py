"""Visitors of the matrix products: linear, addmm/mm, bmm, scaled-dot-product attention. May import torch."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.operators.node_visitor import (
    Node,
    aten,
    dims_of,
    visits,
)
from edgetorch.backends.xnnpack.operators.quant import (
    is_quantized_gemm,
    quantized_bias,
    quantized_weight,
)
from edgetorch.exir.dialects import to_aten

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder


@visits(aten.linear.default)
def _linear(b: XnnpackGraphBuilder, node: Node) -> None:
    x, weight = node.args[:2]
    bias = node.args[2] if len(node.args) > 2 else None
    if is_quantized_gemm(b, node):
        filter_id, scale = quantized_weight(b, weight)
        bias_id = quantized_bias(b, bias, x, scale)
        b.add(
            xs.XNNFullyConnected(
                input1_id=b.value(x), filter_id=filter_id, bias_id=bias_id, output_id=b.output(node), flags=0
            )
        )
        return
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
