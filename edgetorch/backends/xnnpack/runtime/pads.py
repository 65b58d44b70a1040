"""Zero padding folded into the convolution that reads it, before the delegate plans its nodes.

A model written for TensorFlow's "same" padding (EfficientNet-Lite, MobileNet ports) pads each strided
convolution's input with an explicit ``constant_pad_nd`` of zeros, which lowers to a static constant pad node
followed by a convolution with no padding of its own. Run as written, the pad copies the whole activation into
a larger buffer at every call. XNNPACK's subgraph optimizer folds such a pad into the convolution's padding;
this does the same, so the convolution reads its input where it lies and treats the border as zeros, as it does
for its own padding.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.values import Graph, read_ids

_CONVOLUTIONS = (xs.XNNConv2d, xs.XNNDepthwiseConv2d)


def fold_pads(g: Graph, xnodes: list) -> list:
    """``xnodes`` with every foldable pad removed and its padding added to the convolution reading it.

    A pad folds when it pads a 4-d float value with zeros, its output is read by exactly one node, and that node
    is a 2-d or depthwise convolution with explicit padding reading it as its input (not its filter), or a
    transpose whose output only such a convolution reads (the NCHW -> NHWC transpose at a delegate's input);
    the padding must fall on the convolution's height and width, and no padded value may be a graph output.
    """
    readers = Counter(vid for node in xnodes for vid in set(read_ids(node.xnode_union)))
    reader = {vid: i for i, node in enumerate(xnodes) for vid in read_ids(node.xnode_union)}
    external = {vid for _, vid in g.inputs + g.outputs}
    nodes: list[Any] = list(xnodes)
    dropped = set()
    for i, node in enumerate(xnodes):
        pad = node.xnode_union
        if not isinstance(pad, xs.XNNStaticConstantPad) or not _foldable(g, pad, external):
            continue
        pre, post = list(pad.pre_paddings), list(pad.post_paddings)
        value, transpose = pad.output_id, None
        if readers[value] == 1 and isinstance(nodes[reader[value]].xnode_union, xs.XNNStaticTranspose):
            transpose = reader[value]
            perm = list(nodes[transpose].xnode_union.perm)
            if sorted(perm) != [0, 1, 2, 3]:
                continue
            pre, post = [pre[p] for p in perm], [post[p] for p in perm]  # the paddings of the transposed value
            value = nodes[transpose].xnode_union.output_id
        c = reader.get(value)
        if c is None or readers[value] != 1 or value in external or not _convolution_input(nodes[c], value):
            continue
        if pre[0] or post[0] or pre[3] or post[3]:
            continue
        conv = nodes[c].xnode_union
        folded = dataclasses.replace(
            conv,
            padding_top=conv.padding_top + pre[1],
            padding_bottom=conv.padding_bottom + post[1],
            padding_left=conv.padding_left + pre[2],
            padding_right=conv.padding_right + post[2],
        )
        if transpose is None:
            folded = dataclasses.replace(folded, input1_id=pad.input_id)
        else:
            source = dataclasses.replace(nodes[transpose].xnode_union, input_id=pad.input_id)
            nodes[transpose] = dataclasses.replace(nodes[transpose], xnode_union=source)
        nodes[c] = dataclasses.replace(nodes[c], xnode_union=folded)
        dropped.add(i)
    return [node for i, node in enumerate(nodes) if i not in dropped]


def _convolution_input(node: xs.XNode, vid: int) -> bool:
    n = node.xnode_union
    return (
        isinstance(n, _CONVOLUTIONS)
        and not n.flags & xs.FLAG_TENSORFLOW_SAME_PADDING
        and n.input1_id == vid
        and vid not in (n.filter_id, n.bias_id)
    )


def _foldable(g: Graph, pad: xs.XNNStaticConstantPad, external: set[int]) -> bool:
    pre, post = list(pad.pre_paddings), list(pad.post_paddings)
    return (
        pad.padding_value == 0.0
        and len(pre) == len(post) == 4
        and pad.output_id not in external
        and pad.input_id not in g.quant
        and pad.output_id not in g.quant
        and g.dtype(pad.input_id).kind == "f"
    )
