"""The XNNPACK runtime's value table: each blob value's dtype, declared dims and quantization parameters,
its constant data as a zero-copy view (of the blob or of the program's named data), and the graph's
external inputs and outputs; also which value ids a node reads.

Imports only the standard library, NumPy and the backend's format code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import BlobError, XnnpackBlob
from edgetorch.backends.xnnpack.runtime.fp16 import weights_in_input_dtype
from edgetorch.errors import DelegateLoadError, EdgetorchError
from edgetorch.runtime import policy

_DTYPES = {
    xs.XNNDatatype.xnn_datatype_fp32: np.dtype(np.float32),
    xs.XNNDatatype.xnn_datatype_fp16: np.dtype(np.float16),
    xs.XNNDatatype.xnn_datatype_int32: np.dtype(np.int32),
}


_QUANTIZED_DTYPES = {
    xs.XNNDatatype.xnn_datatype_qint8: np.dtype(np.int8),
    xs.XNNDatatype.xnn_datatype_quint8: np.dtype(np.uint8),
    xs.XNNDatatype.xnn_datatype_qint32: np.dtype(np.int32),  # a bias quantized per tensor
    xs.XNNDatatype.xnn_datatype_qcint8: np.dtype(np.int8),
    xs.XNNDatatype.xnn_datatype_qcint32: np.dtype(np.int32),
    xs.XNNDatatype.xnn_datatype_qdint8: np.dtype(np.int8),
    xs.XNNDatatype.xnn_datatype_qbint4: np.dtype(np.uint8),  # two 4-bit weights a byte
}


@dataclass
class QParams:
    """How a quantized XNNPACK value maps to real numbers: ``(q - zero_point) * scale``.

    ``scale`` is a float (per tensor), a float32 vector along ``channel_dim`` (per channel),
    a [channels, groups] float32 matrix (per group of ``group_size`` inputs), or None for
    dynamically quantized values, whose per-row parameters are computed at run time.
    """

    scale: Any
    zero_point: int = 0
    channel_dim: int = 0
    group_size: int = 0
    nonbatch_dims: int = 1  # dynamic: one (scale, zero point) per index of the other, leading dims


class Unsupported(EdgetorchError):
    """A node or parameter combination this runtime cannot run; becomes a DelegateLoadError naming the node."""


class Graph:
    """The blob's values: dtypes, declared dims, constants (zero-copy views) and the external arguments."""

    def __init__(self, blob: XnnpackBlob, named_data: Mapping[str, memoryview]):
        self.values: dict[int, xs.XNNTensorValue] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.quant: dict[int, QParams] = {}
        # Quantized values some reader needs as integers (set before the nodes compile); the others exist
        # only as float32 centred integers (see quantize_steps).
        self.needs_int8: set[int] = set()
        self.fc_inputs: set[int] = set()  # values a fully connected reads (set by the delegate)
        # Value -> integer bounds of the clamp that is its only reader: its producer applies them (see fuse_clamps).
        self.narrow: dict[int, tuple[int, int]] = {}
        self.packs_in_place = True  # whether weights sgemm would read in place are packed (float_layers.py)
        # The tier every node of this delegate runs on, read once at load: a schedule built later for other input
        # shapes takes the same kernels (and the same weights packed at load) whatever the policy says by then.
        self.compiled = policy.compiled_tier()
        # Filters of centred integers (a quantized convolution's, run by the float planner), whose products
        # must be summed exactly: never by Winograd's transforms, which round.
        self.exact: set[int] = set()
        self.named_bytes = sum(memoryview(v).nbytes for v in named_data.values())  # the program's, not only ours
        for value in blob.graph.xvalues:
            self._define(value, blob, named_data)
        weights_in_input_dtype(self, blob.graph.xnodes)  # float32 weights of float16 layers (fp16.py)
        try:
            self.inputs = [(self.value(i).external_id, i) for i in blob.graph.input_ids]
            self.outputs = [(self.value(i).external_id, i) for i in blob.graph.output_ids]
        except Unsupported as e:
            raise DelegateLoadError(f"the XNNPACK graph's external inputs and outputs are malformed: {e}") from None
        self.arg_count = 1 + max((ext for ext, _ in self.inputs + self.outputs), default=-1)

    def _define(self, value: xs.XValue, blob: XnnpackBlob, named_data: Mapping[str, memoryview]) -> None:
        tv = value.xvalue_union
        if isinstance(tv, xs.XNNQuantizedTensorValue):
            tv, params = tv.tensor_value, tv.quant_params
            if tv is not None:
                self.quant[tv.id_out] = self._qparams(tv, params, blob, named_data)
        if tv is None:
            raise DelegateLoadError("the XNNPACK blob has a value with no tensor description; the blob is corrupt")
        dtype = _DTYPES.get(tv.datatype) if tv.id_out not in self.quant else _QUANTIZED_DTYPES.get(tv.datatype)
        if dtype is None or tv.dq_datatype != xs.XNNDatatype.xnn_datatype_invalid:
            raise DelegateLoadError(
                f"XNNPACK value {tv.id_out} has datatype {tv.datatype.name}; edgetorch's XNNPACK runtime supports "
                f"{sorted(d.name for d in list(_DTYPES) + list(_QUANTIZED_DTYPES))}"
            )
        q = self.quant.get(tv.id_out)
        if q is not None and q.scale is not None and np.ndim(q.scale) == 0:
            low, high = qrange(dtype)
            if not low <= q.zero_point <= high:
                raise DelegateLoadError(
                    f"XNNPACK value {tv.id_out} is {tv.datatype.name} with zero point {q.zero_point}, outside "
                    f"[{low}, {high}]; XNNPACK refuses it (ExecuTorch's runtime fails to load it too). ExecuTorch's "
                    "lowering writes activations quantized to uint8 this way: quantize activations as int8 (the "
                    "XNNPACKQuantizer's get_symmetric_quantization_config) and export again"
                )
        self.values[tv.id_out] = tv
        if tv.constant_buffer_idx:
            try:
                data = blob.constant(tv.constant_buffer_idx, named_data)
            except BlobError as e:
                raise DelegateLoadError(f"XNNPACK value {tv.id_out}: {e}") from None
            count = math.prod(tv.dims)
            if tv.datatype == xs.XNNDatatype.xnn_datatype_qbint4:
                count = (count + 1) // 2
            if len(data) < count * dtype.itemsize:
                raise DelegateLoadError(
                    f"XNNPACK constant {tv.id_out} has {len(data)} bytes; dims {list(tv.dims)} of {dtype} need "
                    f"{count * dtype.itemsize}"
                )
            flat = np.frombuffer(data, dtype, count)
            self.constants[tv.id_out] = (
                flat if tv.datatype == xs.XNNDatatype.xnn_datatype_qbint4 else flat.reshape(tv.dims)
            )

    @staticmethod
    def _qparams(tv: xs.XNNTensorValue, params: Any, blob: XnnpackBlob, named_data: Mapping) -> QParams:
        if isinstance(params, xs.PerTensorQuant):
            return QParams(np.float32(params.scale), params.zero_point)
        if isinstance(params, xs.PerTokenDynamicQuant):
            return QParams(None, nonbatch_dims=max(1, params.num_nonbatch_dims))
        if not isinstance(params, (xs.PerChannelQuant, xs.PerChannelGroupQuant)):
            raise DelegateLoadError(f"XNNPACK value {tv.id_out} has quantization parameters of unknown kind {params!r}")
        if params.scale:
            scale = np.asarray(params.scale, np.float32)
        elif getattr(params, "scale_bf16", None):
            scale = (np.asarray(params.scale_bf16, np.uint32) << 16).view(np.float32)
        else:
            try:
                data = blob.constant(params.scale_buffer_idx, named_data)
            except BlobError as e:
                raise DelegateLoadError(f"XNNPACK value {tv.id_out}'s scales: {e}") from None
            # Scales are float32, or bfloat16 (the upper half of a float32) when only that fits.
            if len(data) >= 4 * params.num_scales:
                scale = np.frombuffer(data, np.float32, params.num_scales)
            else:
                scale = (np.frombuffer(data, np.uint16, params.num_scales).astype(np.uint32) << 16).view(np.float32)
        if isinstance(params, xs.PerChannelGroupQuant):
            return QParams(scale.reshape(tv.dims[params.channel_dim], -1), 0, params.channel_dim, params.group_size)
        return QParams(scale, 0, params.channel_dim)

    def shadow(self, vid: int) -> int:
        """A float32 value standing for quantized value ``vid`` (its real numbers, or its centred integers)."""
        sid = -1 - vid  # blob ids are unsigned, so negative ids never collide
        if sid not in self.values:
            self.values[sid] = xs.XNNTensorValue(
                datatype=xs.XNNDatatype.xnn_datatype_fp32, dims=list(self.value(vid).dims), id_out=sid
            )
        return sid

    def dtype(self, vid: int) -> np.dtype:
        v = self.value(vid)
        return _QUANTIZED_DTYPES[v.datatype] if vid in self.quant else _DTYPES[v.datatype]

    def value(self, vid: int) -> xs.XNNTensorValue:
        v = self.values.get(vid)
        if v is None:
            raise Unsupported(f"it refers to value {vid}, which the blob does not define")
        return v

    def constant(self, vid: int, role: str) -> np.ndarray:
        c = self.constants.get(vid)
        if c is None:
            raise Unsupported(f"its {role} (value {vid}) is not a constant")
        return c


def qrange(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


READ_FIELDS = (
    "input_id", "input1_id", "input2_id", "input3_id", "input4_id", "input5_id", "filter_id", "bias_id",
    "query_id", "key_id", "value_id", "scale_id", "mask_id",
)  # fmt: skip


def read_ids(n: Any) -> list[int]:
    """The value ids a node reads."""
    ids = (getattr(n, f, xs.INVALID_VALUE_ID) for f in READ_FIELDS)
    return [i for i in ids if i != xs.INVALID_VALUE_ID]


def readers_of(reads: list) -> dict[int, list[int]]:
    """Value id -> the indices of the nodes that read it, from each node's ``reads`` (the load-time fusions)."""
    readers: dict[int, list[int]] = defaultdict(list)
    for i, ids in enumerate(reads):
        for vid in ids:
            readers[vid].append(i)
    return readers
