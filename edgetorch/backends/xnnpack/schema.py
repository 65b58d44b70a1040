"""The XNNPACK delegate's graph schema (``XNNGraph``, ExecuTorch's XNNPACK ``schema.fbs``) as dataclasses.

Field order follows the schema, which fixes each field's vtable slot; fields the
schema marks deprecated still hold their slot and default to absent. Union
members that share one table layout (``XNNAdd`` and ``XNNSubtract`` are both
``_XNNNode2x1``) are distinct subclasses so that a value's class names its
union tag. Read and write with :mod:`edgetorch.format.flatbuffer`. Torch-free.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from edgetorch.format.flatbuffer import FLOAT, INT, SHORT, STRING, UBYTE, UINT, ULONG, USHORT, Union, Vector, fb

FILE_IDENTIFIER = b"XN01"
LEGACY_FILE_IDENTIFIER = b"XN00"
INVALID_VALUE_ID = 0xFFFFFFFF
NAMED_CONSTANT_OFFSET = 0xFFFFFFFFFFFFFFFF

VALUE_FLAG_EXTERNAL_INPUT = 0x1
VALUE_FLAG_EXTERNAL_OUTPUT = 0x2
FLAG_TRANSPOSE_WEIGHTS = 0x1
FLAG_TRANSPOSE_B = 0x1
FLAG_TENSORFLOW_SAME_PADDING = 0x4
FLAG_TENSORFLOW_LEGACY_MODE = 0x4
FLAG_ALIGN_CORNERS = 0x8
FLAG_KEEP_DIMS = 0x40


class XNNDatatype(enum.IntEnum):
    xnn_datatype_invalid = 0
    xnn_datatype_fp32 = 1
    xnn_datatype_fp16 = 2
    xnn_datatype_qint8 = 3
    xnn_datatype_quint8 = 4
    xnn_datatype_qint32 = 5
    xnn_datatype_qcint8 = 6
    xnn_datatype_qcint32 = 7
    xnn_datatype_qcint4 = 8
    xnn_datatype_qdint8 = 9
    xnn_datatype_qbint4 = 10
    xnn_datatype_qpint8 = 11
    xnn_datatype_int32 = 12
    xnn_datatype_pfp32 = 13
    xnn_datatype_bf16 = 14


@dataclass
class Buffer:
    """Deprecated in-flatbuffer constant storage; older blobs may still carry it."""

    storage: bytes | None = fb(Vector(UBYTE, align=16, blob=True), default=None)


@dataclass
class PerChannelGroupQuant:
    scale: list = fb(Vector(FLOAT))
    channel_dim: int = fb(INT)
    group_size: int = fb(INT)
    scale_bf16: list | None = fb(Vector(USHORT), default=None)
    scale_buffer_idx: int = fb(UINT)
    num_scales: int = fb(UINT)


@dataclass
class PerChannelQuant:
    scale: list = fb(Vector(FLOAT))
    channel_dim: int = fb(INT)
    scale_buffer_idx: int = fb(UINT)
    num_scales: int = fb(UINT)


@dataclass
class PerTokenDynamicQuant:
    num_nonbatch_dims: int = fb(INT)


@dataclass
class PerTensorQuant:
    scale: float = fb(FLOAT)
    zero_point: int = fb(INT)


XNN_QUANT_PARAMS = Union((PerChannelQuant, PerTensorQuant, PerTokenDynamicQuant, PerChannelGroupQuant))


@dataclass
class XNNTensorValue:
    datatype: XNNDatatype = fb(SHORT, XNNDatatype.xnn_datatype_invalid, XNNDatatype)
    num_dims: int = fb(UINT)
    dims: list = fb(Vector(UINT))
    constant_buffer_idx: int = fb(UINT)
    external_id: int = fb(UINT)
    flags: int = fb(UINT)
    id_out: int = fb(UINT)
    # Only in the runtime's schema: the dtype an external input is quantized to at run time.
    dq_datatype: XNNDatatype = fb(SHORT, XNNDatatype.xnn_datatype_invalid, XNNDatatype)


@dataclass
class XNNQuantizedTensorValue:
    tensor_value: XNNTensorValue | None = fb(XNNTensorValue)
    quant_params: object = fb(XNN_QUANT_PARAMS)


@dataclass
class _XNNNode2x1:
    input1_id: int = fb(UINT)
    input2_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class _XNNNode1x1:
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class _XNNCat:
    axis: int = fb(UINT)
    input1_id: int = fb(UINT)
    input2_id: int = fb(UINT)
    input3_id: int = fb(UINT)
    input4_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)
    input5_id: int = fb(UINT)


@dataclass
class _XNNNodeConv:
    padding_top: int = fb(UINT)
    padding_right: int = fb(UINT)
    padding_bottom: int = fb(UINT)
    padding_left: int = fb(UINT)
    kernel_height: int = fb(UINT)
    kernel_width: int = fb(UINT)
    subsampling_height: int = fb(UINT)
    subsampling_width: int = fb(UINT)
    dilation_height: int = fb(UINT)
    dilation_width: int = fb(UINT)
    group_input_channels: int = fb(UINT)
    group_output_channels: int = fb(UINT)
    groups: int = fb(UINT)
    adjustment_height: int = fb(UINT)
    adjustment_width: int = fb(UINT)
    input1_id: int = fb(UINT)
    filter_id: int = fb(UINT)
    bias_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class _XNNPooling2D:
    padding_top: int = fb(UINT)
    padding_right: int = fb(UINT)
    padding_bottom: int = fb(UINT)
    padding_left: int = fb(UINT)
    pooling_height: int = fb(UINT)
    pooling_width: int = fb(UINT)
    stride_height: int = fb(UINT)
    stride_width: int = fb(UINT)
    dilation_height: int = fb(UINT)
    dilation_width: int = fb(UINT)
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNStaticTranspose:
    num_dims: int = fb(UINT)
    perm: list = fb(Vector(UINT))
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNStaticResizeBilinear2D:
    new_height: int = fb(UINT)
    new_width: int = fb(UINT)
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNStaticConstantPad:
    pre_paddings: list = fb(Vector(UINT))
    post_paddings: list = fb(Vector(UINT))
    padding_value: float = fb(FLOAT)
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNELU:
    alpha: float = fb(FLOAT)
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNFullyConnected:
    input1_id: int = fb(UINT)
    filter_id: int = fb(UINT)
    bias_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNStaticReshape:
    num_dims: int = fb(UINT)
    new_shape: list = fb(Vector(UINT))
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNStaticSlice:
    num_dims: int = fb(UINT)
    offsets: list = fb(Vector(UINT))
    sizes: list = fb(Vector(UINT))
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNScaledDotProductAttention:
    query_id: int = fb(UINT)
    key_id: int = fb(UINT)
    value_id: int = fb(UINT)
    scale_id: int = fb(UINT)
    mask_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNArgMaxPooling2d:
    padding_top: int = fb(UINT)
    padding_right: int = fb(UINT)
    padding_bottom: int = fb(UINT)
    padding_left: int = fb(UINT)
    pooling_height: int = fb(UINT)
    pooling_width: int = fb(UINT)
    input_id: int = fb(UINT)
    output_value_id: int = fb(UINT)
    output_index_id: int = fb(UINT)
    flags: int = fb(UINT)


@dataclass
class XNNLeakyReLU:
    negative_slope: float = fb(FLOAT)
    input_id: int = fb(UINT)
    output_id: int = fb(UINT)
    flags: int = fb(UINT)


def _alias(name: str, base: type) -> type:
    """A union member that reuses ``base``'s table layout under its own name (its own union tag)."""
    return dataclass(type(name, (base,), {"__doc__": f"{name}: a {base.__name__} table."}))


XNNAdd = _alias("XNNAdd", _XNNNode2x1)
XNNSoftmax = _alias("XNNSoftmax", _XNNNode1x1)
XNNSigmoid = _alias("XNNSigmoid", _XNNNode1x1)
XNNClamp = _alias("XNNClamp", _XNNNode1x1)
XNNConv2d = _alias("XNNConv2d", _XNNNodeConv)
XNNDiv = _alias("XNNDiv", _XNNNode2x1)
XNNAvgPooling2d = _alias("XNNAvgPooling2d", _XNNPooling2D)
XNNMinimum = _alias("XNNMinimum", _XNNNode2x1)
XNNDepthwiseConv2d = _alias("XNNDepthwiseConv2d", _XNNNodeConv)
XNNMaxPooling2d = _alias("XNNMaxPooling2d", _XNNPooling2D)
XNNMultiply = _alias("XNNMultiply", _XNNNode2x1)
XNNSubtract = _alias("XNNSubtract", _XNNNode2x1)
XNNFloor = _alias("XNNFloor", _XNNNode1x1)
XNNConvert = _alias("XNNConvert", _XNNNode1x1)
XNNGlobalAvgPooling2d = _alias("XNNGlobalAvgPooling2d", _XNNNode1x1)
XNNSquareRoot = _alias("XNNSquareRoot", _XNNNode1x1)
XNNCeiling = _alias("XNNCeiling", _XNNNode1x1)
XNNHardswish = _alias("XNNHardswish", _XNNNode1x1)
XNNMaximum = _alias("XNNMaximum", _XNNNode2x1)
XNNNegate = _alias("XNNNegate", _XNNNode1x1)
XNNSquare = _alias("XNNSquare", _XNNNode1x1)
XNNAbs = _alias("XNNAbs", _XNNNode1x1)
XNNPReLU = _alias("XNNPReLU", _XNNNode2x1)
XNNConcatenate2 = _alias("XNNConcatenate2", _XNNCat)
XNNConcatenate3 = _alias("XNNConcatenate3", _XNNCat)
XNNConcatenate4 = _alias("XNNConcatenate4", _XNNCat)
XNNBatchMatrixMultiply = _alias("XNNBatchMatrixMultiply", _XNNNode2x1)
XNNConcatenate5 = _alias("XNNConcatenate5", _XNNCat)
XNNConvTranspose2d = _alias("XNNConvTranspose2d", _XNNNodeConv)
XNNReciprocalSquareRoot = _alias("XNNReciprocalSquareRoot", _XNNNode1x1)
XNNLog = _alias("XNNLog", _XNNNode1x1)
XNNGelu = _alias("XNNGelu", _XNNNode1x1)
XNNTanh = _alias("XNNTanh", _XNNNode1x1)
XNNExp = _alias("XNNExp", _XNNNode1x1)
XNNSin = _alias("XNNSin", _XNNNode1x1)
XNNCopy = _alias("XNNCopy", _XNNNode1x1)
XNNCos = _alias("XNNCos", _XNNNode1x1)

XNODE_UNION = Union(
    (
        XNNAdd, XNNFullyConnected, XNNSoftmax, XNNSigmoid, XNNStaticTranspose, XNNClamp, XNNConv2d, XNNDiv,
        XNNStaticResizeBilinear2D, XNNStaticConstantPad, XNNAvgPooling2d, XNNMinimum, XNNDepthwiseConv2d,
        XNNMaxPooling2d, XNNMultiply, XNNSubtract, XNNFloor, XNNConvert, XNNGlobalAvgPooling2d, XNNStaticReshape,
        XNNArgMaxPooling2d, XNNSquareRoot, XNNCeiling, XNNHardswish, XNNLeakyReLU, XNNMaximum, XNNNegate, XNNSquare,
        XNNELU, XNNAbs, XNNPReLU, XNNConcatenate2, XNNConcatenate3, XNNConcatenate4, XNNStaticSlice,
        XNNScaledDotProductAttention, XNNBatchMatrixMultiply, XNNConcatenate5, XNNConvTranspose2d,
        XNNReciprocalSquareRoot, XNNLog, XNNGelu, XNNTanh, XNNExp, XNNSin, XNNCopy, XNNCos,
    )
)  # fmt: skip

XVALUE_UNION = Union((XNNTensorValue, XNNQuantizedTensorValue))


@dataclass
class OutputMinMax:
    output_min: float = fb(FLOAT)
    output_max: float = fb(FLOAT)


@dataclass
class XNode:
    xnode_union: object = fb(XNODE_UNION)
    debug_handle: int = fb(UINT)
    output_min_max: OutputMinMax | None = fb(OutputMinMax)


@dataclass
class XValue:
    xvalue_union: object = fb(XVALUE_UNION)


@dataclass
class ConstantDataOffset:
    """Where a constant lives: ``offset``/``size`` into the blob's constant data, or ``named_key`` in the named data."""

    offset: int = fb(ULONG)
    size: int = fb(ULONG)
    named_key: str | None = fb(STRING)


@dataclass
class XNNGraph:
    version: str | None = fb(STRING)
    xnodes: list = fb(Vector(XNode))
    xvalues: list = fb(Vector(XValue))
    num_externs: int = fb(UINT)
    input_ids: list = fb(Vector(UINT))
    output_ids: list = fb(Vector(UINT))
    constant_buffer: list | None = fb(Vector(Buffer), default=None)
    mem_buffer_sizes: list | None = fb(Vector(UINT), default=None)
    constant_data: list = fb(Vector(ConstantDataOffset))


def tensor_value(value: XValue) -> XNNTensorValue:
    """The plain tensor description of a value, quantized or not."""
    v = value.xvalue_union
    return v.tensor_value if isinstance(v, XNNQuantizedTensorValue) else v
