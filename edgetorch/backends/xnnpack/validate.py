"""Checks an ``XNNGraph`` against what ExecuTorch's XNNPACK runtime assumes, before the blob is written.

ExecuTorch's runtime trusts a blob: a value used before it is defined, an external id outside the delegate's
arguments, a transpose whose permutation is not one, or a constant that points past its data ends in a crash
of the process that loads the program, not in an error. ``validate_graph`` refuses such a graph with an
``XnnpackGraphError`` that says what was expected, what was found and what to do. It checks:

* values: a known datatype, ``num_dims`` equal to the length of ``dims`` (at most six), ``id_out`` unique,
  flags only external-input or external-output, an external id exactly when a flag is set, constants not
  external and their ``constant_data`` entry in range (inside the blob's constant data, or a named key the
  program holds) and of the tensor's byte size;
* quantized values: quantization parameters of the kind the datatype needs (per tensor for QS8/QU8/QS32,
  per channel for QC8/QC32/QC4, per channel and group for QB4, per token for QD8; none for float values), a
  zero point in the datatype's range, finite positive inline scales, scales in ``constant_data`` of
  ``num_scales`` floats, a channel dimension inside the value's dims holding ``num_scales`` channels;
* externals: ``num_externs`` values with distinct ids, the inputs numbered ``0..I-1`` and the outputs
  ``I..I+O-1`` (ExecuTorch indexes the delegate's arguments with them), ``input_ids``/``output_ids`` listing
  exactly those values in external-id order, the counts the caller expects;
* nodes, in order: every input id defined before use (an external input, a constant or an earlier node's
  output), every output written once and never a constant or an external input, every external output written;
  a clamp range with min <= max; and each node kind's parameters and shapes (element-wise and broadcast shapes,
  transpose permutations, reshape element counts, slice and pad bounds, concatenation axes, fully connected,
  batch matmul, convolution and pooling geometry, resize and global pooling).

Shapes are compared at their upper bounds, the sizes the serializer writes for dynamic dimensions. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import fields

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.errors import EdgetorchError
from edgetorch.runtime.ops import window

__all__ = ["XnnpackGraphError", "validate_graph"]

MAX_DIMS = 6
MAX_EXTERNS = 4096
OUTPUT_FIELDS = ("output_id", "output_value_id", "output_index_id")
OPTIONAL_INPUTS = ("bias_id", "mask_id")
BYTES_PER_ELEMENT = {
    xs.XNNDatatype.xnn_datatype_fp32: 4,
    xs.XNNDatatype.xnn_datatype_fp16: 2,
    xs.XNNDatatype.xnn_datatype_bf16: 2,
    xs.XNNDatatype.xnn_datatype_int32: 4,
    xs.XNNDatatype.xnn_datatype_qint8: 1,
    xs.XNNDatatype.xnn_datatype_quint8: 1,
    xs.XNNDatatype.xnn_datatype_qcint8: 1,
    xs.XNNDatatype.xnn_datatype_qint32: 4,
    xs.XNNDatatype.xnn_datatype_qcint32: 4,
}
D = xs.XNNDatatype
QUANT_KIND = {
    D.xnn_datatype_qint8: xs.PerTensorQuant,
    D.xnn_datatype_quint8: xs.PerTensorQuant,
    D.xnn_datatype_qint32: xs.PerTensorQuant,
    D.xnn_datatype_qcint8: xs.PerChannelQuant,
    D.xnn_datatype_qcint32: xs.PerChannelQuant,
    D.xnn_datatype_qcint4: xs.PerChannelQuant,
    D.xnn_datatype_qbint4: xs.PerChannelGroupQuant,
    D.xnn_datatype_qdint8: xs.PerTokenDynamicQuant,
}
"""Quantized datatype -> the quantization parameters a value of it carries."""
ZERO_POINT_RANGE = {D.xnn_datatype_qint8: (-128, 127), D.xnn_datatype_quint8: (0, 255), D.xnn_datatype_qint32: (0, 0)}
CONCATENATE_ARITY = {xs.XNNConcatenate2: 2, xs.XNNConcatenate3: 3, xs.XNNConcatenate4: 4, xs.XNNConcatenate5: 5}
ELEMENTWISE_1X1 = (
    xs.XNNSoftmax, xs.XNNSigmoid, xs.XNNClamp, xs.XNNFloor, xs.XNNConvert, xs.XNNSquareRoot, xs.XNNCeiling,
    xs.XNNHardswish, xs.XNNNegate, xs.XNNSquare, xs.XNNAbs, xs.XNNReciprocalSquareRoot, xs.XNNLog, xs.XNNGelu,
    xs.XNNTanh, xs.XNNExp, xs.XNNSin, xs.XNNCopy, xs.XNNCos, xs.XNNELU, xs.XNNLeakyReLU,
)  # fmt: skip
BROADCAST_2X1 = (xs.XNNAdd, xs.XNNSubtract, xs.XNNMultiply, xs.XNNDiv, xs.XNNMinimum, xs.XNNMaximum)


class XnnpackGraphError(EdgetorchError, ValueError):
    """An XNNPACK graph that ExecuTorch's XNNPACK runtime would reject or crash on."""


def _fail(where: str, expected: str, found: str, fix: str) -> XnnpackGraphError:
    return XnnpackGraphError(f"XNNPACK graph, {where}: expected {expected}, found {found}; {fix}")


SERIALIZER_BUG = "the XNNPACK serializer wrote an invalid graph: report it with the model that produced it"


def validate_graph(
    graph: xs.XNNGraph,
    constant_data_size: int = 0,
    named_keys: Collection[str] | None = None,
    num_inputs: int | None = None,
    num_outputs: int | None = None,
) -> None:
    """Raise ``XnnpackGraphError`` unless ExecuTorch's XNNPACK runtime can load and run ``graph`` safely.

    ``constant_data_size`` is the size of the blob's own constant data; ``named_keys``, when given, the named
    data the program (or its ``.ptd``) holds; ``num_inputs``/``num_outputs``, when given, the delegate's
    argument counts.
    """
    values = _check_values(graph, constant_data_size, named_keys)
    _check_externals(graph, values, num_inputs, num_outputs)
    _check_nodes(graph, values)


# ------------------------------------------------------------------- values


def _check_values(
    graph: xs.XNNGraph, constant_data_size: int, named_keys: Collection[str] | None
) -> dict[int, xs.XNNTensorValue]:
    values: dict[int, xs.XNNTensorValue] = {}
    entries = graph.constant_data or []
    for index, value in enumerate(graph.xvalues):
        tv = xs.tensor_value(value) if value.xvalue_union is not None else None
        where = f"value {index}"
        if tv is None:
            raise _fail(where, "a tensor value", "an empty value", SERIALIZER_BUG)
        if tv.id_out in values:
            raise _fail(where, "a unique id_out", f"id_out {tv.id_out} used twice", SERIALIZER_BUG)
        where = f"value {tv.id_out}"
        if tv.datatype == xs.XNNDatatype.xnn_datatype_invalid or tv.datatype not in set(xs.XNNDatatype):
            raise _fail(where, "a valid XNNPACK datatype", f"datatype {tv.datatype!r}", SERIALIZER_BUG)
        dims = list(tv.dims or [])
        if tv.num_dims != len(dims) or len(dims) > MAX_DIMS:
            raise _fail(
                where, f"num_dims equal to len(dims) and at most {MAX_DIMS}", f"num_dims {tv.num_dims}, dims {dims}",
                SERIALIZER_BUG,
            )  # fmt: skip
        _check_flags(where, tv)
        _check_quantization(where, tv, getattr(value.xvalue_union, "quant_params", None), entries)
        if tv.constant_buffer_idx:
            _check_constant(where, tv, entries, constant_data_size, named_keys)
        values[tv.id_out] = tv
    return values


def _check_quantization(
    where: str, tv: xs.XNNTensorValue, params: object, entries: Sequence[xs.ConstantDataOffset]
) -> None:
    kind = QUANT_KIND.get(tv.datatype)
    if not isinstance(params, kind or type(None)):
        wanted = "no quantization parameters" if kind is None else f"{kind.__name__} parameters"
        raise _fail(where, f"{wanted} for datatype {tv.datatype.name}", type(params).__name__, SERIALIZER_BUG)
    if isinstance(params, xs.PerTensorQuant):
        lo, hi = ZERO_POINT_RANGE[tv.datatype]
        ok = math.isfinite(params.scale) and params.scale > 0 and lo <= params.zero_point <= hi
        if not ok:
            raise _fail(
                where, f"a finite positive scale and a zero point in [{lo}, {hi}]",
                f"scale {params.scale}, zero point {params.zero_point}", SERIALIZER_BUG,
            )  # fmt: skip
    elif isinstance(params, xs.PerChannelQuant | xs.PerChannelGroupQuant):
        _check_channel_scales(where, tv, params, entries)


def _check_channel_scales(
    where: str,
    tv: xs.XNNTensorValue,
    params: xs.PerChannelQuant | xs.PerChannelGroupQuant,
    entries: Sequence[xs.ConstantDataOffset],
) -> None:
    dims = list(tv.dims or [])
    if not 0 <= params.channel_dim < len(dims):
        raise _fail(where, f"a channel dim in 0..{len(dims) - 1}", f"channel_dim {params.channel_dim}", SERIALIZER_BUG)
    channels = dims[params.channel_dim]
    if isinstance(params, xs.PerChannelGroupQuant):
        inner = dims[1 - params.channel_dim] if len(dims) == 2 else 0
        ok = params.group_size > 0 and inner % params.group_size == 0
        if not ok:
            raise _fail(where, f"a group size dividing {inner}", f"group_size {params.group_size}", SERIALIZER_BUG)
        channels *= inner // params.group_size
    inline, bf16 = list(params.scale or []), list(getattr(params, "scale_bf16", None) or [])
    if inline or bf16:
        if len(inline or bf16) != channels or not all(math.isfinite(x) and x > 0 for x in inline):
            raise _fail(where, f"{channels} finite positive scales", f"{len(inline or bf16)} scales", SERIALIZER_BUG)
        return
    itemsize = 2 if isinstance(params, xs.PerChannelGroupQuant) else 4
    index = params.scale_buffer_idx
    if params.num_scales != channels or not 0 < index < len(entries):
        raise _fail(
            where, f"{channels} scales in constant data (an index below {len(entries)})",
            f"num_scales {params.num_scales} at index {index}", SERIALIZER_BUG,
        )  # fmt: skip
    if entries[index].size != channels * itemsize:
        raise _fail(where, f"{channels * itemsize} bytes of scales", f"{entries[index].size} bytes", SERIALIZER_BUG)


def _check_flags(where: str, tv: xs.XNNTensorValue) -> None:
    allowed = (0, xs.VALUE_FLAG_EXTERNAL_INPUT, xs.VALUE_FLAG_EXTERNAL_OUTPUT)
    if tv.flags not in allowed:
        raise _fail(
            where, "flags 0, external input (1) or external output (2)", f"flags {tv.flags:#x}",
            "a delegate input that is also its output cannot be expressed: keep the pass-through out of the "
            "partition",
        )  # fmt: skip
    external = tv.external_id != xs.INVALID_VALUE_ID
    if external != bool(tv.flags):
        raise _fail(
            where, "an external id exactly when an external flag is set",
            f"flags {tv.flags:#x} with external id {tv.external_id}", SERIALIZER_BUG,
        )  # fmt: skip


def _check_constant(
    where: str,
    tv: xs.XNNTensorValue,
    entries: Sequence[xs.ConstantDataOffset],
    constant_data_size: int,
    named_keys: Collection[str] | None,
) -> None:
    if tv.flags:
        raise _fail(where, "a constant that is not external", f"flags {tv.flags:#x}", SERIALIZER_BUG)
    if tv.constant_buffer_idx >= len(entries):
        raise _fail(
            where, f"a constant_data index below {len(entries)}", f"index {tv.constant_buffer_idx}", SERIALIZER_BUG
        )
    entry = entries[tv.constant_buffer_idx]
    if entry.named_key:
        if named_keys is not None and entry.named_key not in named_keys:
            raise _fail(
                where, "a named constant the program or its .ptd holds", f"key {entry.named_key!r}, held nowhere",
                "add the constant to the backend's named data store",
            )  # fmt: skip
    elif entry.offset + entry.size > constant_data_size:
        raise _fail(
            where, f"constant bytes within the blob's {constant_data_size} bytes of constant data",
            f"bytes {entry.offset}..{entry.offset + entry.size}", SERIALIZER_BUG,
        )  # fmt: skip
    itemsize = BYTES_PER_ELEMENT.get(tv.datatype)
    if itemsize is not None and entry.size != math.prod(tv.dims) * itemsize:
        raise _fail(
            where, f"{math.prod(tv.dims) * itemsize} bytes of constant data for dims {list(tv.dims)}",
            f"{entry.size} bytes", SERIALIZER_BUG,
        )  # fmt: skip


def _check_externals(
    graph: xs.XNNGraph, values: dict[int, xs.XNNTensorValue], num_inputs: int | None, num_outputs: int | None
) -> None:
    inputs = sorted((v.external_id, i) for i, v in values.items() if v.flags == xs.VALUE_FLAG_EXTERNAL_INPUT)
    outputs = sorted((v.external_id, i) for i, v in values.items() if v.flags == xs.VALUE_FLAG_EXTERNAL_OUTPUT)
    for kind, found, expected in (("inputs", inputs, num_inputs), ("outputs", outputs, num_outputs)):
        if expected is not None and len(found) != expected:
            raise _fail(
                f"external {kind}", f"{expected} (the delegate's {kind})", f"{len(found)} values flagged so",
                SERIALIZER_BUG,
            )  # fmt: skip
    ids = [e for e, _ in inputs + outputs]
    if ids != list(range(len(ids))):
        raise _fail(
            "external ids", f"inputs numbered 0..{len(inputs) - 1}, then outputs, each once (0..{len(ids) - 1})",
            f"inputs {[e for e, _ in inputs]}, outputs {[e for e, _ in outputs]}",
            "ExecuTorch indexes the delegate's arguments with these ids: " + SERIALIZER_BUG,
        )  # fmt: skip
    if graph.num_externs != len(ids) or graph.num_externs > MAX_EXTERNS:
        raise _fail(
            "num_externs", f"{len(ids)} (the external values, at most {MAX_EXTERNS})", str(graph.num_externs),
            SERIALIZER_BUG,
        )  # fmt: skip
    for kind, listed, flagged in (("input_ids", graph.input_ids, inputs), ("output_ids", graph.output_ids, outputs)):
        if list(listed or []) != [i for _, i in flagged]:
            raise _fail(
                kind, f"the external values in external-id order {[i for _, i in flagged]}", str(list(listed or [])),
                SERIALIZER_BUG,
            )  # fmt: skip


# -------------------------------------------------------------------- nodes


def _check_nodes(graph: xs.XNNGraph, values: dict[int, xs.XNNTensorValue]) -> None:
    defined = {i for i, v in values.items() if v.constant_buffer_idx or v.flags == xs.VALUE_FLAG_EXTERNAL_INPUT}
    for position, xnode in enumerate(graph.xnodes):
        node = xnode.xnode_union
        where = f"node {position} ({type(node).__name__})"
        if node is None:
            raise _fail(f"node {position}", "a node", "an empty node", SERIALIZER_BUG)
        inputs, outputs = _ids(where, node)
        for name, vid in inputs:
            if vid == xs.INVALID_VALUE_ID:
                continue
            if vid not in values:
                raise _fail(where, f"{name} naming one of the values 0..{len(values) - 1}", str(vid), SERIALIZER_BUG)
            if vid not in defined:
                raise _fail(
                    where, f"{name} {vid} defined before use (an input, a constant or an earlier node's output)",
                    "a value no earlier node writes", SERIALIZER_BUG,
                )  # fmt: skip
        for name, vid in outputs:
            if vid not in values:
                raise _fail(where, f"{name} naming one of the values 0..{len(values) - 1}", str(vid), SERIALIZER_BUG)
            if vid in defined:
                raise _fail(
                    where, f"{name} {vid} a value nothing else defines",
                    "a constant, an external input or a value an earlier node writes", SERIALIZER_BUG,
                )  # fmt: skip
            defined.add(vid)
        minmax = xnode.output_min_max
        if minmax is not None and not minmax.output_min <= minmax.output_max:
            raise _fail(
                where, "output_min <= output_max", f"[{minmax.output_min}, {minmax.output_max}]", SERIALIZER_BUG
            )
        shape = NodeShapes(where, values)
        check = SHAPE_RULES.get(type(node))
        if check is not None:
            check(shape, node)
    for vid, value in values.items():
        if value.flags == xs.VALUE_FLAG_EXTERNAL_OUTPUT and vid not in defined:
            raise _fail(f"value {vid}", "every external output written by a node", "none writes it", SERIALIZER_BUG)


def _ids(where: str, node: object) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The (field, value id) pairs a node reads and writes; unused optional inputs are INVALID_VALUE_ID."""
    inputs, outputs = [], []
    arity = CONCATENATE_ARITY.get(type(node))
    for f in fields(node):
        if not f.name.endswith("_id"):
            continue
        vid = getattr(node, f.name)
        if f.name in OUTPUT_FIELDS:
            outputs.append((f.name, vid))
            continue
        optional = f.name in OPTIONAL_INPUTS or (arity is not None and int(f.name[5]) > arity)
        if vid == xs.INVALID_VALUE_ID and not optional:
            raise _fail(where, f"a value id in {f.name}", "none (INVALID_VALUE_ID)", SERIALIZER_BUG)
        if arity is not None and int(f.name[5]) > arity and vid != xs.INVALID_VALUE_ID:
            raise _fail(where, f"{f.name} unused in a {arity}-input concatenation", f"value {vid}", SERIALIZER_BUG)
        inputs.append((f.name, vid))
    return inputs, outputs


class NodeShapes:
    """Shape checks of one node; each failure names the node and the values involved."""

    def __init__(self, where: str, values: dict[int, xs.XNNTensorValue]) -> None:
        self.where = where
        self.values = values

    def dims(self, vid: int) -> list[int]:
        return list(self.values[vid].dims or [])

    def require(self, ok: bool, expected: str, found: str) -> None:
        if not ok:
            raise _fail(self.where, expected, found, SERIALIZER_BUG)

    def output_is(self, node: object, want: Sequence[int]) -> None:
        got = self.dims(node.output_id)
        self.require(list(want) == got, f"output dims {list(want)}", f"{got}")

    def positive(self, node: object, *names: str) -> None:
        bad = {n: getattr(node, n) for n in names if getattr(node, n) < 1}
        self.require(not bad, f"{', '.join(names)} at least 1", str(bad))

    def rank4(self, vid: int, what: str) -> list[int]:
        dims = self.dims(vid)
        self.require(len(dims) == 4, f"a 4-d (NHWC) {what}", f"dims {dims}")
        return dims


def _same_shape(s: NodeShapes, node: object) -> None:
    s.output_is(node, s.dims(node.input_id))


def _broadcast(s: NodeShapes, node: object) -> None:
    s.output_is(node, _broadcast_dims(s, s.dims(node.input1_id), s.dims(node.input2_id)))


def _prelu(s: NodeShapes, node: object) -> None:
    x, slope = s.dims(node.input1_id), s.dims(node.input2_id)
    s.require(len(slope) == 1 and slope[0] in (1, x[-1]), f"a slope of 1 or {x[-1]} values", f"dims {slope}")
    s.output_is(node, x)


def _transpose(s: NodeShapes, node: xs.XNNStaticTranspose) -> None:
    x, perm = s.dims(node.input_id), list(node.perm or [])
    s.require(
        node.num_dims == len(perm) == len(x) and sorted(perm) == list(range(len(x))),
        f"a permutation of 0..{len(x) - 1} with num_dims {len(x)}", f"perm {perm}, num_dims {node.num_dims}",
    )  # fmt: skip
    s.output_is(node, [x[p] for p in perm])


def _reshape(s: NodeShapes, node: xs.XNNStaticReshape) -> None:
    shape, out = list(node.new_shape or []), s.dims(node.output_id)
    s.require(node.num_dims == len(shape) == len(out), f"num_dims {len(out)} new sizes", f"{node.num_dims}, {shape}")
    s.require(shape.count(0) <= 1, "at most one inferred (0) dimension", f"new_shape {shape}")
    s.require(all(n in (0, d) for n, d in zip(shape, out)), f"new_shape matching output dims {out}", f"{shape}")
    count = math.prod(s.dims(node.input_id))
    s.require(count == math.prod(out), f"{count} elements, as the input has", f"output dims {out}")


def _slice(s: NodeShapes, node: xs.XNNStaticSlice) -> None:
    x, offsets, sizes = s.dims(node.input_id), list(node.offsets or []), list(node.sizes or [])
    s.require(
        node.num_dims == len(offsets) == len(sizes) == len(x), f"{len(x)} offsets and sizes",
        f"num_dims {node.num_dims}, offsets {offsets}, sizes {sizes}",
    )  # fmt: skip
    s.require(
        all(o + n <= d for o, n, d in zip(offsets, sizes, x)), f"a slice inside input dims {x}",
        f"offsets {offsets}, sizes {sizes}",
    )  # fmt: skip
    s.output_is(node, [n or d - o for o, n, d in zip(offsets, sizes, x)])


def _pad(s: NodeShapes, node: xs.XNNStaticConstantPad) -> None:
    x, pre, post = s.dims(node.input_id), list(node.pre_paddings or []), list(node.post_paddings or [])
    s.require(len(pre) == len(post) == len(x), f"{len(x)} pre and post paddings", f"{pre} and {post}")
    s.output_is(node, [d + a + b for d, a, b in zip(x, pre, post)])


def _concatenate(s: NodeShapes, node: object) -> None:
    ids = [getattr(node, f"input{i}_id") for i in range(1, CONCATENATE_ARITY[type(node)] + 1)]
    shapes = [s.dims(i) for i in ids]
    rank = len(shapes[0])
    s.require(node.axis < rank, f"an axis below the rank {rank}", f"axis {node.axis}")
    rest = {tuple(d[: node.axis] + d[node.axis + 1 :]) for d in shapes}
    s.require(len(rest) == 1 and all(len(d) == rank for d in shapes), "inputs equal off the axis", str(shapes))
    out = list(shapes[0])
    out[node.axis] = sum(d[node.axis] for d in shapes)
    s.output_is(node, out)


def _fully_connected(s: NodeShapes, node: xs.XNNFullyConnected) -> None:
    x, w = s.dims(node.input1_id), s.dims(node.filter_id)
    s.require(len(w) == 2, "a 2-d filter", f"dims {w}")
    cin, cout = (w[0], w[1]) if node.flags & xs.FLAG_TRANSPOSE_WEIGHTS else (w[1], w[0])
    s.require(x[-1] == cin, f"an input of {cin} features (the filter's)", f"input dims {x}")
    if node.bias_id != xs.INVALID_VALUE_ID:
        s.require(s.dims(node.bias_id) == [cout], f"a bias of dims [{cout}]", str(s.dims(node.bias_id)))
    out = s.dims(node.output_id)
    s.require(out[-1] == cout and math.prod(out) == math.prod(x) // cin * cout, f"{cout} output features", str(out))


def _batch_matmul(s: NodeShapes, node: object) -> None:
    a, b = s.dims(node.input1_id), s.dims(node.input2_id)
    s.require(len(a) >= 2 and len(b) >= 2, "inputs of at least 2 dims", f"{a} and {b}")
    k, n = (b[-1], b[-2]) if node.flags & xs.FLAG_TRANSPOSE_B else (b[-2], b[-1])
    s.require(a[-1] == k, f"inner dims that agree ({a[-1]} and {k})", f"{a} and {b}")
    batch = _broadcast_dims(s, a[:-2], b[:-2])
    s.output_is(node, [*batch, a[-2], n])


def _broadcast_dims(s: NodeShapes, a: list[int], b: list[int]) -> list[int]:
    rank = max(len(a), len(b))
    a, b = [1] * (rank - len(a)) + a, [1] * (rank - len(b)) + b
    s.require(all(x == y or 1 in (x, y) for x, y in zip(a, b)), "broadcastable dims", f"{a} and {b}")
    return [max(x, y) for x, y in zip(a, b)]


def _convolution(s: NodeShapes, node: object) -> None:
    s.positive(
        node, "kernel_height", "kernel_width", "subsampling_height", "subsampling_width", "dilation_height",
        "dilation_width", "groups", "group_input_channels", "group_output_channels",
    )  # fmt: skip
    n, h, w, c = s.rank4(node.input1_id, "input")
    filt = s.rank4(node.filter_id, "filter")
    groups, cin, cout = node.groups, node.group_input_channels, node.group_output_channels
    s.require(c == groups * cin, f"{groups} x {cin} input channels", f"input dims {[n, h, w, c]}")
    kernel = [node.kernel_height, node.kernel_width]
    want = [1, *kernel, groups * cout] if isinstance(node, xs.XNNDepthwiseConv2d) else [groups * cout, *kernel, cin]
    s.require(filt == want, f"filter dims {want}", str(filt))
    if node.bias_id != xs.INVALID_VALUE_ID:
        s.require(s.dims(node.bias_id) == [groups * cout], f"a bias of {groups * cout}", str(s.dims(node.bias_id)))
    pads = (node.padding_top, node.padding_bottom, node.padding_left, node.padding_right)
    strides = (node.subsampling_height, node.subsampling_width)
    dilations = (node.dilation_height, node.dilation_width)
    if isinstance(node, xs.XNNConvTranspose2d):
        adjust = (node.adjustment_height, node.adjustment_width)
        size = [
            (d - 1) * st + dil * (k - 1) + 1 + a - before - after
            for d, st, dil, k, a, before, after in zip(
                (h, w), strides, dilations, kernel, adjust, pads[::2], pads[1::2]
            )
        ]
    else:
        size = [
            window.output_size(d, k, st, before, after, dil)
            for d, before, after, k, st, dil in zip((h, w), pads[::2], pads[1::2], kernel, strides, dilations)
        ]
    s.output_is(node, [n, *size, groups * cout])


def _pooling(s: NodeShapes, node: object) -> None:
    s.positive(node, "pooling_height", "pooling_width", "stride_height", "stride_width")
    if isinstance(node, xs.XNNMaxPooling2d):
        s.positive(node, "dilation_height", "dilation_width")
    n, h, w, c = s.rank4(node.input_id, "input")
    dilation = (node.dilation_height or 1, node.dilation_width or 1)
    size = [
        window.output_size(d, k, st, before, after, dil)
        for d, before, after, k, st, dil in zip(
            (h, w), (node.padding_top, node.padding_left), (node.padding_bottom, node.padding_right),
            (node.pooling_height, node.pooling_width), (node.stride_height, node.stride_width), dilation,
        )
    ]  # fmt: skip
    s.output_is(node, [n, *size, c])


def _global_pooling(s: NodeShapes, node: object) -> None:
    n, _, _, c = s.rank4(node.input_id, "input")
    s.output_is(node, [n, 1, 1, c])


def _resize(s: NodeShapes, node: xs.XNNStaticResizeBilinear2D) -> None:
    s.positive(node, "new_height", "new_width")
    n, _, _, c = s.rank4(node.input_id, "input")
    s.output_is(node, [n, node.new_height, node.new_width, c])


SHAPE_RULES = {
    **dict.fromkeys(ELEMENTWISE_1X1, _same_shape),
    **dict.fromkeys(BROADCAST_2X1, _broadcast),
    **dict.fromkeys(CONCATENATE_ARITY, _concatenate),
    **dict.fromkeys((xs.XNNConv2d, xs.XNNDepthwiseConv2d, xs.XNNConvTranspose2d), _convolution),
    **dict.fromkeys((xs.XNNMaxPooling2d, xs.XNNAvgPooling2d), _pooling),
    xs.XNNPReLU: _prelu,
    xs.XNNStaticTranspose: _transpose,
    xs.XNNStaticReshape: _reshape,
    xs.XNNStaticSlice: _slice,
    xs.XNNStaticConstantPad: _pad,
    xs.XNNFullyConnected: _fully_connected,
    xs.XNNBatchMatrixMultiply: _batch_matmul,
    xs.XNNGlobalAvgPooling2d: _global_pooling,
    xs.XNNStaticResizeBilinear2D: _resize,
}
"""Node kind -> its parameter and shape check; kinds without one are checked for value ids only."""
