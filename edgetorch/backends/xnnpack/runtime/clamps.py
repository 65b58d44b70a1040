"""Clamp fusion at load: a clamp that is the only reader of its input moves into that input's producer.

Quantized (between equal per-tensor parameters): the producer clips to the clamp's integer bounds when it
rounds. Float: the producer's output bounds take the clamp's, and the clamp becomes a copy that shares its
input's memory. ExecuTorch fuses ReLU/ReLU6 into the layer when it lowers; edgetorch's lowering (and
ExecuTorch's static int8 lowering) keeps a clamp node, which would cost a pass over the layer's output.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.epilogues import min_max
from edgetorch.backends.xnnpack.runtime.planners import APPLY_ACTIVATION
from edgetorch.backends.xnnpack.runtime.quantization import qbounds, same_tensor_params
from edgetorch.backends.xnnpack.runtime.values import Graph


def _reader_counts(reads: list) -> Counter:
    """Value id -> how many nodes read it (``reads``: each node's read value ids)."""
    return Counter(vid for r in reads for vid in set(r))


def fuse_clamps(g: Graph, xnodes: list, reads: list) -> None:
    """Record in ``g.narrow`` each quantized clamp that is the only reader of its input, between equal
    per-tensor parameters: the input's producer clips to the clamp's bounds when it rounds, and the
    clamp passes its input on (ExecuTorch's static int8 lowering keeps ReLU6 as a node of its own)."""
    readers = _reader_counts(reads)
    for node in xnodes:
        n = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in g.needs_int8:
            continue
        qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)
        if qin is not None and qout is not None and same_tensor_params(qin, qout):
            lo, hi = min_max(node)
            g.narrow[n.input_id] = qbounds(g.dtype(n.output_id), qout.scale, qout.zero_point, lo, hi)


# Float nodes that write a fresh output buffer, so that a clamp reading only them can clamp it in place.
_CLAMP_FUSABLE = (*APPLY_ACTIVATION, xs.XNNConvTranspose2d, xs.XNNBatchMatrixMultiply)


def fuse_float_clamps(g: Graph, xnodes: list, reads: list) -> list:
    """The nodes to compile: ``xnodes`` with each float clamp that is the only reader of a fresh-output
    node's (with no activation of its own) moved into that node's output bounds, and the clamp itself made a
    copy (which shares its input's memory). ExecuTorch fuses ReLU/ReLU6 into the layer when it lowers;
    edgetorch's lowering keeps a clamp node, which costs a pass over the layer's output and, in the fast
    tier, is free inside the layer's own last pass."""
    readers = _reader_counts(reads)
    producer = {getattr(node.xnode_union, "output_id", None): i for i, node in enumerate(xnodes)}
    external = {vid for _, vid in g.inputs + g.outputs}
    nodes = list(xnodes)
    for i, node in enumerate(xnodes):
        n: Any = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in external:
            continue
        p = producer.get(n.input_id)
        if p is None or p > i or not isinstance(nodes[p].xnode_union, _CLAMP_FUSABLE):
            continue
        if nodes[p].output_min_max is not None or n.input_id in g.quant or n.output_id in g.quant:
            continue
        if g.dtype(n.input_id).kind != "f":
            continue
        nodes[p] = dataclasses.replace(nodes[p], output_min_max=node.output_min_max)
        copy = xs.XNNCopy(n.input_id, n.output_id, n.flags)
        nodes[i] = dataclasses.replace(node, xnode_union=copy, output_min_max=None)
    return nodes
