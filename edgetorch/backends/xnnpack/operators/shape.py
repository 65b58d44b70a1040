"""Visitors of Edge ops that move data without arithmetic: getitem, reshape, permute, cat, slice, pad. May import torch."""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.operators.node_visitor import (
    TO_NCHW,
    TO_NHWC,
    Node,
    aten,
    dims_of,
    permuted,
    reshape_target,
    visits,
)

if TYPE_CHECKING:
    from edgetorch.backends.xnnpack.serialize import XnnpackGraphBuilder


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
