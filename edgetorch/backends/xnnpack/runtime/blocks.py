"""MobileNet's inverted residual blocks, each run as one step on the fast tier.

A pointwise convolution that expands the channels, a depthwise convolution and a pointwise convolution that
projects them back (MobileNetV2, EfficientNet-Lite and their kin: the ``Conv2d -> DepthwiseConv2d -> Conv2d``
of ``edgetorch inspect``) become one node whose step is runtime/kernels/inverted_residual.py: the expanded
values stay in the cache instead of going to memory and back twice, and the block is one parallel region instead
of three. A block without the expanding layer (MobileNetV2's first: depthwise, then the projection) is fused
the same way. Each output has the same bits as layer by layer.

A block is fused on the compiled tier only, where both pointwise layers are 1x1 convolutions of stride 1 with no
padding and one group, the depthwise layer has a channel multiplier of 1, every filter and bias is a float32
constant, and each value between the layers is read by the next layer alone (through the copy a fused clamp
leaves) and is neither an external value nor quantized. The add of the block's input to its output after a
stride-1 block is fused with it when it is the projection's only reader and has no clamp.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.chains import Absorbed
from edgetorch.backends.xnnpack.runtime.epilogues import min_max
from edgetorch.backends.xnnpack.runtime.float_layers import packed_gemm
from edgetorch.backends.xnnpack.runtime.geometry import conv_window, nhwc
from edgetorch.backends.xnnpack.runtime.memory import Env, Planner
from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported, readers_of
from edgetorch.runtime.kernels import depthwise, gemm, inverted_residual


@dataclasses.dataclass(frozen=True)
class InvertedResidual:
    """``output = project(depthwise(expand(input)))``, each layer the node it was with its clamp, ``expand``
    None for a block without one (field names as the schema's, so ``read_ids`` reads the input)."""

    input_id: int
    output_id: int
    layers: tuple[xs.XNode | None, xs.XNode, xs.XNode]
    residual: bool = False  # the output is the input plus the projection (the add after a stride-1 block)
    flags: int = 0


def fuse_blocks(g: Graph, nodes: list, reads: list) -> list:
    """``nodes`` with every inverted residual block made one node (``InvertedResidual``) at its projecting
    layer and ``Absorbed`` nodes before it; ``reads`` is updated to match. Nothing is fused off the tier."""
    if not g.compiled:
        return nodes
    readers = readers_of(reads)
    external = {vid for _, vid in g.inputs + g.outputs}
    out = list(nodes)

    def next_layer(vid: int, kind: type) -> tuple[list[int], int] | None:
        """The nodes from value ``vid`` (a copy a fused clamp left, if any) to the one ``kind`` layer reading
        it as its input, each the only reader of the value before it; None if there is no such chain."""
        passed: list[int] = []
        while True:
            users = readers.get(vid, [])
            if len(users) != 1 or vid in external or vid in g.quant or g.dtype(vid) != np.float32:
                return None
            n = out[users[0]].xnode_union
            if isinstance(n, xs.XNNCopy) and out[users[0]].output_min_max is None:
                passed.append(users[0])
                vid = n.output_id
                continue
            if isinstance(n, kind) and n.input1_id == vid:
                return passed, users[0]
            return None

    def residual_add(x: int, project: int) -> int | None:
        """The add of the block's input ``x`` to the projection (node ``project``), when it is the projection's
        only reader, has no clamp and no broadcast, else None."""
        vid = out[project].xnode_union.output_id
        users = readers.get(vid, [])
        if len(users) != 1 or vid in external or vid in g.quant:
            return None
        a = out[users[0]]
        n = a.xnode_union
        if not isinstance(n, xs.XNNAdd) or a.output_min_max is not None or n.output_id in g.quant:
            return None
        if {n.input1_id, n.input2_id} != {x, vid} or x == vid or list(g.value(x).dims) != list(g.value(vid).dims):
            return None
        return users[0]

    def fuse(x: int, absorbed: list[int], layers: tuple, project: int) -> None:
        """Make the nodes ``absorbed`` and the projection one ``InvertedResidual`` node reading ``x``, with the
        residual add after it when there is one."""
        add = residual_add(x, project)
        last = project if add is None else add
        for a in [*absorbed, project] if add is not None else absorbed:
            out[a] = dataclasses.replace(
                out[a], xnode_union=Absorbed(out[a].xnode_union.output_id), output_min_max=None
            )
            reads[a] = []
        fused = InvertedResidual(x, out[last].xnode_union.output_id, layers, add is not None)
        out[last] = dataclasses.replace(out[last], xnode_union=fused, output_min_max=None)
        reads[last] = [x]

    for i in range(len(nodes)):
        node = out[i]  # as fused so far: a layer of an earlier block is not also the first of the next
        expand = node.xnode_union
        if not _pointwise(g, expand) or expand.input1_id in g.quant or g.dtype(expand.input1_id) != np.float32:
            continue
        found = next_layer(expand.output_id, xs.XNNDepthwiseConv2d)
        if found is None or not _depthwise(g, out[found[1]].xnode_union):
            continue
        first, d = found
        found = next_layer(out[d].xnode_union.output_id, xs.XNNConv2d)
        if found is None or not _pointwise(g, out[found[1]].xnode_union):
            continue
        second, p = found
        project = out[p]
        sizes = (expand.group_input_channels, expand.group_output_channels, project.xnode_union.group_output_channels)
        if not _float_output(g, project) or not inverted_residual.takes(*sizes):
            continue
        fuse(expand.input1_id, [i, *first, d, *second], (node, nodes[d], project), p)

    for d in range(len(nodes)):  # the blocks that do not expand: a depthwise layer, then the projection
        dw = out[d].xnode_union
        if not isinstance(dw, xs.XNNDepthwiseConv2d) or not _depthwise(g, dw) or dw.input1_id in g.quant:
            continue
        if g.dtype(dw.input1_id) != np.float32:
            continue
        found = next_layer(dw.output_id, xs.XNNConv2d)
        if found is None or not _pointwise(g, out[found[1]].xnode_union):
            continue
        second, p = found
        project = out[p]
        if not _float_output(g, project) or not inverted_residual.takes(
            0, dw.groups, project.xnode_union.group_output_channels
        ):
            continue
        fuse(dw.input1_id, [d, *second], (None, nodes[d], project), p)
    return out


def _float_output(g: Graph, node: xs.XNode) -> bool:
    vid = node.xnode_union.output_id
    return vid not in g.quant and g.dtype(vid) == np.float32


def _constant(g: Graph, vid: int, optional: bool = False) -> bool:
    if vid == xs.INVALID_VALUE_ID:
        return optional
    a = g.constants.get(vid)
    return a is not None and a.dtype == np.float32 and vid not in g.quant


def _pointwise(g: Graph, n: Any) -> bool:
    return (
        isinstance(n, xs.XNNConv2d)
        and n.groups == 1
        and n.kernel_height == n.kernel_width == n.subsampling_height == n.subsampling_width == 1
        and n.dilation_height == n.dilation_width == 1
        and not (n.padding_top or n.padding_bottom or n.padding_left or n.padding_right)
        and not n.flags & xs.FLAG_TENSORFLOW_SAME_PADDING
        and _constant(g, n.filter_id)
        and _constant(g, n.bias_id, optional=True)
        and n.filter_id not in g.exact
    )


def _depthwise(g: Graph, n: Any) -> bool:
    return (
        n.group_input_channels == 1
        and n.group_output_channels == 1
        and not n.flags & xs.FLAG_TENSORFLOW_SAME_PADDING
        and _constant(g, n.filter_id)
        and _constant(g, n.bias_id, optional=True)
    )


def _packed(g: Graph, node: xs.XNode) -> gemm.PackedGemm:
    """A 1x1 layer's packed GEMM with its bias and clamp, as the layer's own planner packs it."""
    n = node.xnode_union
    w = g.constant(n.filter_id, "filter").reshape(n.group_output_channels, n.group_input_channels)
    packed = packed_gemm(np.ascontiguousarray(w.T), g, n.bias_id, min_max(node))
    if packed is None:
        raise Unsupported(f"the block's 1x1 layer (node {node.debug_handle}) has no float32 filter and bias")
    return packed


def _inverted_residual(n: InvertedResidual, node: xs.XNode, g: Graph) -> Planner:
    first, middle, last = n.layers
    expand, project = None if first is None else _packed(g, first), _packed(g, last)
    d = middle.xnode_union
    win = conv_window(d)
    channels = d.groups
    if (expand is not None and expand.n != channels) or project.k != channels:
        raise Unsupported(
            f"the block's depthwise layer takes {channels} channels, its projection {project.k} and its expanding "
            f"layer gives {expand.n if expand is not None else 'none'}"
        )
    taps = np.ascontiguousarray(g.constant(d.filter_id, "filter").reshape(win.kh * win.kw, channels))
    bias = g.constants.get(d.bias_id) if d.bias_id != xs.INVALID_VALUE_ID else None
    bias = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias.reshape(-1))
    lo, hi = min_max(middle)
    geometry = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)

    def plan(env: Env) -> list:
        x = env[n.input_id]
        nb, h, wd, c = nhwc(x, "inverted residual block")
        if c != (channels if expand is None else expand.k):
            raise ValueError(
                f"the block expects {channels if expand is None else expand.k} input channels, found input shape {x.shape}"
            )
        oh, ow = win.out_hw(h, wd)
        y = env.empty(n.output_id, (nb, oh, ow, project.n))
        block = f"fused block of nodes {(first or middle).debug_handle}-{last.debug_handle}"  # for inspect --kernels
        where = f"{block}: depthwise convolution, node {middle.debug_handle}"
        ex = np.empty((1, h, wd, channels), np.float32)  # the shapes the depthwise kernels are measured on
        mid = np.empty((1, oh, ow, channels), np.float32)
        kernel = depthwise.choose(ex, taps, bias, mid, *geometry, lo, hi, where=where).kernel
        kernels = (
            "packed"
            if expand is None
            else gemm.choose_packed(expand, nb * h * wd, f"{block}: convolution, node {first.debug_handle}").kernel,
            gemm.choose_packed(project, nb * oh * ow, f"{block}: convolution, node {last.debug_handle}").kernel,
        )
        layer = inverted_residual.Depthwise(taps, bias, geometry, lo, hi, kernel)
        step = inverted_residual.step(expand, layer, project, x, y, kernels, n.residual)
        if step is None:
            raise Unsupported(f"the fused block cannot take input {list(x.shape)} to output {list(y.shape)}")
        return [step]

    return plan


PLANNERS = {InvertedResidual: _inverted_residual}
