"""float16 graphs whose layers keep float32 weights: the layout ExecuTorch's XNNPACK lowering writes.

ExecuTorch stores the filter and bias of a float16 convolution (and, in some versions, of a fully
connected node) as float32 constants; XNNPACK converts them to float16 when it packs them. This runtime's
layers take weights in their input's dtype, so ``weights_in_input_dtype`` does that conversion once, at
load time, for every such constant: a copy of the constant instead of the zero-copy view.

Imports only the standard library, NumPy and the backend's format code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.runtime.values import Graph

__all__ = ["weights_in_input_dtype"]

FP16, FP32 = xs.XNNDatatype.xnn_datatype_fp16, xs.XNNDatatype.xnn_datatype_fp32
_LAYERS = (xs.XNNConv2d, xs.XNNDepthwiseConv2d, xs.XNNConvTranspose2d, xs.XNNFullyConnected)


def weights_in_input_dtype(graph: Graph, xnodes: Iterable[xs.XNode]) -> None:
    """Convert the float32 filter and bias constants of layers reading a float16 input to float16, in place."""
    for xnode in xnodes:
        node: Any = xnode.xnode_union
        if not isinstance(node, _LAYERS) or _datatype(graph, node.input1_id) != FP16:
            continue
        for vid in (node.filter_id, node.bias_id):
            if vid in graph.constants and vid not in graph.quant and _datatype(graph, vid) == FP32:
                graph.constants[vid] = graph.constants[vid].astype(np.float16)
                graph.values[vid] = dataclasses.replace(graph.values[vid], datatype=FP16)


def _datatype(graph: Graph, vid: int) -> xs.XNNDatatype | None:
    value = graph.values.get(vid)
    return None if value is None else value.datatype
