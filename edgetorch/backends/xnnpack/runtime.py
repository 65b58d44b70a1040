"""The XNNPACK backend's runtime half: runs ExecuTorch XNNPACK delegate blobs with NumPy.

``init`` parses the blob, resolves constants as zero-copy views (of the blob or
of the program's named data), prepacks weights, and compiles the node list into
planners. A planner, given the arrays of its inputs at concrete shapes,
allocates its outputs and returns bound steps (BLAS calls and ufuncs writing
into preallocated memory). A plan (the steps for one set of input shapes) is
built once and reused; a call with new input shapes builds a new one, which is
how XNNPACK graphs reshape at run time. Inside the graph, convolutions and
pooling work on NHWC tensors; ExecuTorch's lowering inserts the transposes from
and to the NCHW tensors the delegate exchanges with the program.

Imports only the standard library, NumPy and the format code; registers itself
as ``XnnpackBackend`` at import.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from edgetorch.backends.xnnpack import fast, qfast, qgemm, qgemv
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.blob import BlobError, XnnpackBlob, parse_blob
from edgetorch.errors import DelegateLoadError, InvalidInputError
from edgetorch.runtime import etdump, policy
from edgetorch.runtime.backends import BackendInterface, register_backend
from edgetorch.runtime.kernels import blas_threads, gemm, winograd
from edgetorch.runtime.kernels import compiled as compiled_kernels
from edgetorch.runtime.memory import resize

Step = Callable[[], Any]
Planner = Callable[["_Env"], list]

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
_MAX_PLANS = 8


@dataclass
class _QParams:
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


class _Unsupported(Exception):
    """A node or parameter combination this runtime cannot run; becomes a DelegateLoadError naming the node."""


# ----------------------------------------------------------------------------- values


class _Graph:
    """The blob's values: dtypes, declared dims, constants (zero-copy views) and the external arguments."""

    def __init__(self, blob: XnnpackBlob, named_data: Mapping[str, memoryview]):
        self.values: dict[int, xs.XNNTensorValue] = {}
        self.constants: dict[int, np.ndarray] = {}
        self.quant: dict[int, _QParams] = {}
        # Quantized values some reader needs as integers (set before the nodes compile); the others exist
        # only as float32 centred integers (see _quantize_steps).
        self.needs_int8: set[int] = set()
        self.fc_inputs: set[int] = set()  # values a fully connected reads (set by the delegate)
        # Value -> integer bounds of the clamp that is its only reader: its producer applies them (see _fuse_clamps).
        self.narrow: dict[int, tuple[int, int]] = {}
        # Whether a node runs the packed GEMM, whose threads need BLAS on one thread (blas_threads.py).
        self.own_threads = False
        self.packed_bytes = 0  # packed copies of weights sgemm would read in place (_packed_gemm)
        # Filters of centred integers (a quantized convolution's, run by the float planner), whose products
        # must be summed exactly: never by Winograd's transforms, which round.
        self.exact: set[int] = set()
        self.named_bytes = sum(memoryview(v).nbytes for v in named_data.values())  # the program's, not only ours
        for value in blob.graph.xvalues:
            self._define(value, blob, named_data)
        try:
            self.inputs = [(self.value(i).external_id, i) for i in blob.graph.input_ids]
            self.outputs = [(self.value(i).external_id, i) for i in blob.graph.output_ids]
        except _Unsupported as e:
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
            low, high = _qrange(dtype)
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
    def _qparams(tv: xs.XNNTensorValue, params: Any, blob: XnnpackBlob, named_data: Mapping) -> _QParams:
        if isinstance(params, xs.PerTensorQuant):
            return _QParams(np.float32(params.scale), params.zero_point)
        if isinstance(params, xs.PerTokenDynamicQuant):
            return _QParams(None, nonbatch_dims=max(1, params.num_nonbatch_dims))
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
            return _QParams(scale.reshape(tv.dims[params.channel_dim], -1), 0, params.channel_dim, params.group_size)
        return _QParams(scale, 0, params.channel_dim)

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
            raise _Unsupported(f"it refers to value {vid}, which the blob does not define")
        return v

    def constant(self, vid: int, role: str) -> np.ndarray:
        c = self.constants.get(vid)
        if c is None:
            raise _Unsupported(f"its {role} (value {vid}) is not a constant")
        return c


_CHUNK = 4 << 20
_SCRATCH: list[np.ndarray] = []
"""The memory every delegate's plans take their buffers from (all but persistent ones), in chunks.

A delegate's intermediates, and the copies of its inputs and outputs, are only live while one of its plans runs:
the inputs are copied in at the start of ``execute`` and the outputs copied out at its end. So every plan of
every delegate lays its buffers out from the start of the same chunks (``_Cursor``), and a process holds the
largest plan's bytes, not their sum (a SmolLM2 program has 150 delegates with two plans each, 0.6 GB apart).
Calls run one at a time (``_RUN``), which is what makes the sharing safe."""


class _Cursor:
    """One plan's bump allocation over ``_SCRATCH``, from the first chunk's start."""

    def __init__(self) -> None:
        self.index = self.offset = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        size = math.prod(shape) * dtype.itemsize
        slot = -(-max(size, 1) // 64) * 64  # 64-byte aligned slots
        while True:
            if self.index == len(_SCRATCH):
                _SCRATCH.append(np.empty(max(_CHUNK, slot), np.uint8))
            chunk, start = _SCRATCH[self.index], self.offset
            if start + slot <= chunk.nbytes:
                self.offset = start + slot
                return chunk[start : start + size].view(dtype).reshape(shape)
            self.index, self.offset = self.index + 1, 0


_RUN = threading.Lock()  # one delegate call (or plan build) at a time: they share _SCRATCH


class _Env:
    """Value id -> array while a plan is built: constants, external inputs and every intermediate.

    Intermediates share memory: once the last node reading a buffer (directly or through a reshape or
    copy alias) is planned, the buffer goes back to a pool that later outputs of the same byte size
    draw from. Steps run in node order, so a reused buffer is written only after its last reader ran.
    External inputs and outputs and persistent buffers (a pad's border is written once) are never pooled.
    """

    def __init__(self, graph: _Graph, last_use: Mapping[int, int], pinned: set[int]):
        self.graph = graph
        self.arrays: dict[int, np.ndarray] = dict(graph.constants)
        self.last_use = last_use
        self.root: dict[int, int] = {}  # value -> the value that owns its memory
        self.end: dict[int, int] = {}  # owning value -> index of the last node reading any of its aliases
        self.pinned = set(pinned)
        self.free: dict[int, list[np.ndarray]] = {}
        self.dynamic: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # qdint8 value -> per-row (scale, zero point)
        self.centred: dict[int, np.ndarray] = {}  # per-tensor quantized value -> float32 q - zero_point
        self.narrowed: set[int] = set()  # values whose producer applied the following clamp's bounds
        self.extra: dict[int, list[np.ndarray]] = {}  # value -> float32 buffers pooled with its own memory
        self.fc_input: dict[int, np.ndarray] = {}  # qdint8 value -> its dequantized [rows, K + 1] (qfast.py)
        self.cursor = _Cursor()

    def __getitem__(self, vid: int) -> np.ndarray:
        a = self.arrays.get(vid)
        if a is None:
            raise _Unsupported(f"it reads value {vid} before any node produces it")
        return a

    def empty(self, vid: int, shape: Sequence[int], persistent: bool = False) -> np.ndarray:
        """A fresh or recycled C-contiguous array for value ``vid``; ``persistent`` keeps it out of the pool."""
        shape, dtype = tuple(int(d) for d in shape), self.graph.dtype(vid)
        pool = self.free.get(math.prod(shape) * dtype.itemsize)
        if persistent:
            a = np.empty(shape, dtype)
            self.pinned.add(vid)
        elif pool:
            a = pool.pop().view(dtype).reshape(shape)
        else:
            a = self.cursor.take(shape, dtype)
        self.arrays[vid], self.root[vid], self.end[vid] = a, vid, self.last_use.get(vid, -1)
        return a

    def centred_buffer(self, vid: int, shape: Sequence[int]) -> np.ndarray:
        """A float32 buffer for value ``vid``'s centred integers, recorded as ``centred[vid]``; it goes back to
        the pool with ``vid``'s own memory (so quantized graphs reuse memory as float ones do)."""
        shape = tuple(int(d) for d in shape)
        pool = self.free.get(4 * math.prod(shape))
        a = pool.pop().view(np.float32).reshape(shape) if pool else self.cursor.take(shape, np.dtype(np.float32))
        self.extra.setdefault(vid, []).append(a)
        self.centred[vid] = a
        return a

    def ones_column(self, rows: int, k: int) -> tuple[np.ndarray, Step]:
        """A [rows, k + 1] float32 buffer and the step that sets its last column to 1 (the bias row's
        multiplier), run at every call since the memory is shared."""
        buf = self.cursor.take((rows, k + 1), np.dtype(np.float32))
        return buf, partial(np.copyto, buf[:, k], np.float32(1))

    def hand_over(self, source: int, vid: int) -> None:
        """Value ``vid`` takes over ``source``'s centred buffer (``source`` has no other reader)."""
        a = self.centred[vid] = self.centred[source]
        self.extra[source] = [b for b in self.extra.get(source, []) if b is not a]
        self.extra.setdefault(vid, []).append(a)

    def alias(self, vid: int, source: int, array: np.ndarray) -> None:
        """Value ``vid`` is ``array``, a view of value ``source``'s memory."""
        root = self.root.get(source, source)
        self.arrays[vid], self.root[vid] = array, root
        if root in self.end:
            self.end[root] = max(self.end[root], self.last_use.get(vid, -1))
        if vid in self.pinned:
            self.pinned.add(root)

    def release(self, index: int, reads: Sequence[int]) -> None:
        """After node ``index`` is planned, pool the buffers nothing after it reads."""
        for root in {self.root[v] for v in reads if v in self.root}:
            end = self.end.get(root)
            if end is not None and end <= index and root not in self.pinned:
                del self.end[root]
                for a in [self.arrays[root], *self.extra.pop(root, [])]:
                    self.free.setdefault(a.nbytes, []).append(a.reshape(-1).view(np.uint8))


# ------------------------------------------------------------------------- shared math


def _clamp(src: np.ndarray, dst: np.ndarray, lo: float, hi: float) -> list:
    """Steps that write clamp(src) into dst; in place when src is dst."""
    if lo == -math.inf and hi == math.inf:
        return [] if src is dst else [partial(np.copyto, dst, src)]
    # np.clip with an infinite bound is 3.5x faster than np.maximum / np.minimum with a scalar (float32).
    return [partial(np.clip, src, dst.dtype.type(lo), dst.dtype.type(hi), out=dst)]


def _min_max(node: xs.XNode) -> tuple[float, float]:
    mm = node.output_min_max
    return (-math.inf, math.inf) if mm is None else (mm.output_min, mm.output_max)


@dataclass(frozen=True)
class _Window:
    """A 2-D sliding window over NHWC data: kernel, stride, dilation and padding."""

    kh: int
    kw: int
    sh: int
    sw: int
    dh: int
    dw: int
    top: int
    right: int
    bottom: int
    left: int

    @property
    def padded(self) -> bool:
        return bool(self.top or self.right or self.bottom or self.left)

    def out_hw(self, h: int, w: int) -> tuple[int, int]:
        oh = (h + self.top + self.bottom - self.dh * (self.kh - 1) - 1) // self.sh + 1
        ow = (w + self.left + self.right - self.dw * (self.kw - 1) - 1) // self.sw + 1
        if oh <= 0 or ow <= 0:
            raise ValueError(f"a {self.kh}x{self.kw} window does not fit a {h}x{w} input")
        return oh, ow

    def pad(self, x: np.ndarray, fill: float) -> tuple[np.ndarray, list]:
        """``x`` with its borders padded by ``fill`` (set once), and the step that copies the interior in."""
        if not self.padded:
            return x, []
        n, h, w, c = x.shape
        xp = np.full((n, h + self.top + self.bottom, w + self.left + self.right, c), fill, x.dtype)
        return xp, [partial(np.copyto, xp[:, self.top : self.top + h, self.left : self.left + w, :], x)]

    def tap(self, xp: np.ndarray, i: int, j: int, oh: int, ow: int) -> np.ndarray:
        """The [N, OH, OW, C] view of ``xp`` that kernel tap (i, j) reads."""
        r, c = i * self.dh, j * self.dw
        return xp[:, r : r + self.sh * (oh - 1) + 1 : self.sh, c : c + self.sw * (ow - 1) + 1 : self.sw, :]

    def taps(self) -> list[tuple[int, int]]:
        return [(i, j) for i in range(self.kh) for j in range(self.kw)]

    def tap_views(self, x: np.ndarray, fill: float) -> tuple[list[np.ndarray], list]:
        """The [N, OH, OW, C] view of every tap (in ``taps()`` order) over ``x`` padded by ``fill``, and the
        steps that refresh the views' memory from ``x``.

        A strided window reads from one persistent padded plane per stride phase (for stride 2: even and odd
        rows times even and odd columns), so each tap view has contiguous rows and NumPy runs one long inner
        loop per row instead of one per pixel (3x3 stride 2 depthwise on 112x112x96: 1.23 -> 0.73 ms).
        """
        n, h, w, c = x.shape
        oh, ow = self.out_hw(h, w)
        if not self.padded and (self.sh == self.sw == 1 or self.kh * self.kw <= self.sh * self.sw):
            return [self.tap(x, i, j, oh, ow) for i, j in self.taps()], []
        hp, wp = h + self.top + self.bottom, w + self.left + self.right
        planes, steps = {}, []
        for a in range(self.sh):
            for b in range(self.sw):
                plane = np.full((n, len(range(a, hp, self.sh)), len(range(b, wp, self.sw)), c), fill, x.dtype)
                h0, w0 = (a - self.top) % self.sh, (b - self.left) % self.sw  # first rows/columns of x it holds
                src = x[:, h0 :: self.sh, w0 :: self.sw]
                k0, l0 = (h0 + self.top - a) // self.sh, (w0 + self.left - b) // self.sw
                if src.size:
                    steps.append(partial(np.copyto, plane[:, k0 : k0 + src.shape[1], l0 : l0 + src.shape[2]], src))
                planes[a, b] = plane
        views = []
        for i, j in self.taps():
            r, s = i * self.dh, j * self.dw
            plane = planes[r % self.sh, s % self.sw]
            views.append(plane[:, r // self.sh : r // self.sh + oh, s // self.sw : s // self.sw + ow])
        return views, steps

    def im2col(self, xp: np.ndarray, oh: int, ow: int) -> np.ndarray:
        """The read-only [N, OH, OW, KH, KW, C] view of every window of ``xp``."""
        n, _, _, c = xp.shape
        s0, s1, s2, s3 = xp.strides
        shape = (n, oh, ow, self.kh, self.kw, c)
        strides = (s0, s1 * self.sh, s2 * self.sw, s1 * self.dh, s2 * self.dw, s3)
        return as_strided(xp, shape, strides, writeable=False)


def _explicit_padding(n: Any) -> None:
    if n.flags & xs.FLAG_TENSORFLOW_SAME_PADDING:
        raise _Unsupported("TensorFlow SAME padding (flag 0x4) is not supported; explicit paddings are")


def _conv_window(n: Any) -> _Window:
    _explicit_padding(n)
    return _Window(
        n.kernel_height, n.kernel_width, n.subsampling_height, n.subsampling_width,
        max(n.dilation_height, 1), max(n.dilation_width, 1),
        n.padding_top, n.padding_right, n.padding_bottom, n.padding_left,
    )  # fmt: skip


def _pool_window(n: Any) -> _Window:
    _explicit_padding(n)
    return _Window(
        n.pooling_height, n.pooling_width, max(n.stride_height, 1), max(n.stride_width, 1),
        max(n.dilation_height, 1), max(n.dilation_width, 1),
        n.padding_top, n.padding_right, n.padding_bottom, n.padding_left,
    )  # fmt: skip


def _nhwc(x: np.ndarray, what: str) -> tuple[int, int, int, int]:
    if x.ndim != 4:
        raise ValueError(f"{what} expects a 4-d NHWC input, found shape {x.shape}")
    return x.shape


def _bias_steps(y2: np.ndarray, env: _Env, bias_id: int) -> list:
    if bias_id == xs.INVALID_VALUE_ID:
        return []
    return [_add_to_rows(y2, env[bias_id].reshape(-1))]


_NO_CLAMP = (-math.inf, math.inf)


def _bias_act_steps(y2: np.ndarray, env: _Env, bias_id: int, act: tuple[float, float]) -> list:
    """Steps that add the bias (if any) to every row of ``y2`` and clamp it to ``act``: one compiled pass in
    the fast tier (fast.py; the same float32 results, 1.5-3x faster than NumPy's one pass for each on
    MobileNetV2's and the transformers' layer outputs), else a NumPy pass for each."""
    has_bias = bias_id != xs.INVALID_VALUE_ID
    if (has_bias or act != _NO_CLAMP) and y2.dtype == np.float32:
        fused = fast.kernel("bias_clamp")
        if fused is not None:
            bias = env[bias_id].reshape(-1) if has_bias else np.empty(0, np.float32)
            return [partial(fused, y2, bias, np.float32(act[0]), np.float32(act[1]))]
    return _bias_steps(y2, env, bias_id) + _clamp(y2, y2, *act)


def _packed_gemm(
    w: np.ndarray, g: _Graph, bias_id: int, act: tuple[float, float], in_place: bool = False
) -> gemm.PackedGemm | None:
    """The fast tier's GEMM (edgetorch/runtime/kernels/gemm.py) for the float32 constant ``w`` [K, N] with its
    constant bias (if any) and the clamp ``act`` in the same pass, packed now; None without the tier, when the
    weights or bias are not float32 constants, or when ``w`` could be read in place (a [K, N] constant, no copy
    made for sgemm) and packing it would pass the delegate's share of the policy's ``pack_budget`` (those keep sgemm)."""
    if w.dtype != np.float32 or not fast.usable():
        return None
    if in_place:
        if g.packed_bytes + w.nbytes > policy.current().pack_budget:
            return None
        g.packed_bytes += w.nbytes
    bias = None
    if bias_id != xs.INVALID_VALUE_ID:
        bias = g.constants.get(bias_id)
        if bias is None or bias.dtype != np.float32 or bias.size != w.shape[1]:
            return None
    g.own_threads = True
    return gemm.PackedGemm(w, bias, *act)


def _winograd_weights(n: Any, g: _Graph, ocg: int, icg: int) -> np.ndarray | None:
    """A 3x3 convolution's weights in Winograd's form (runtime/kernels/winograd.py) when the fast tier is
    usable and its filter and bias (if any) are float32 constants, else None."""
    filt = g.constants.get(n.filter_id)
    bias = g.constants.get(n.bias_id) if n.bias_id != xs.INVALID_VALUE_ID else np.empty(ocg, np.float32)
    if not fast.usable() or filt is None or bias is None or bias.size != ocg:
        return None
    if filt.dtype != np.float32 or bias.dtype != np.float32:
        return None
    g.own_threads = True
    return winograd.prepare(filt.reshape(ocg, 3, 3, icg))


def _add_to_rows(y2: np.ndarray, row: np.ndarray) -> Step:
    """The step y2 += row on every row of the C-contiguous [M, C] ``y2``.

    With few channels NumPy's inner loop is short; adding the row tiled k times to y2 seen as [M/k, k*C]
    halves the time for 16-32 channels.
    """
    m, c = y2.shape
    k = max(d for d in range(1, 1 + min(64, max(1, 512 // c))) if m % d == 0)
    wide = y2.reshape(m // k, k * c)
    return partial(np.add, wide, np.tile(row, k), out=wide)


# -------------------------------------------------------------------------- the nodes

_COMPILERS: dict[type, Callable[[Any, xs.XNode, _Graph], Planner]] = {}


def _compiles(*kinds: type) -> Callable:
    def register(fn: Callable) -> Callable:
        for kind in kinds:
            _COMPILERS[kind] = fn
        return fn

    return register


@_compiles(xs.XNNFullyConnected)
def _fully_connected(n: Any, node: xs.XNode, g: _Graph, act: tuple[float, float] = _NO_CLAMP) -> Planner:
    transposed = bool(n.flags & xs.FLAG_TRANSPOSE_WEIGHTS)
    packed = fused = None
    if n.filter_id in g.constants:
        w = g.constants[n.filter_id]
        fused = _packed_gemm(w if transposed else w.T, g, n.bias_id, act, in_place=transposed)
        if fused is None:
            packed = np.ascontiguousarray(w if transposed else w.T)  # [in, out] for x @ w

    def plan(env: _Env) -> list:
        x = env[n.input1_id]
        if fused is not None:
            ic, oc = fused.k, fused.n
        else:
            w = packed if packed is not None else (env[n.filter_id] if transposed else env[n.filter_id].T)
            ic, oc = w.shape
        if x.shape[-1] != ic:
            raise ValueError(f"fully connected expects {ic} input features, found input shape {x.shape}")
        y = env.empty(n.output_id, x.shape[:-1] + (oc,))
        y2 = y.reshape(-1, oc)
        if fused is not None:
            return [fused.step(x.reshape(-1, ic), y2)]
        return [partial(np.matmul, x.reshape(-1, ic), w, out=y2)] + _bias_act_steps(y2, env, n.bias_id, act)

    return plan


@_compiles(xs.XNNConv2d)
def _convolution(n: Any, node: xs.XNode, g: _Graph, act: tuple[float, float] = _NO_CLAMP) -> Planner:
    win, groups, icg, ocg = _conv_window(n), n.groups, n.group_input_channels, n.group_output_channels
    k = win.kh * win.kw * icg
    # [OC, KH, KW, ICg] -> per group [K, OCg], so that columns @ w is the convolution.
    w = np.ascontiguousarray(g.constant(n.filter_id, "filter").reshape(groups, ocg, k).transpose(0, 2, 1))
    pointwise = win.kh == win.kw == win.sh == win.sw == 1 and not win.padded
    shape = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, groups, icg, ocg)
    minimal = winograd.eligible(*shape) and n.filter_id not in g.exact
    # The packed weights: a 3x3 stride-1 layer makes the form its first plan takes (Winograd's, or the
    # direct GEMM's for an output of few tiles), so that it does not hold both.
    forms: dict[str, Any] = {}

    def packed(form: str) -> Any:
        if form not in forms:
            forms[form] = (
                _winograd_weights(n, g, ocg, icg) if form == "winograd" else _packed_gemm(w[0], g, n.bias_id, act)
            )
        return forms[form]

    if groups == 1 and not minimal:
        packed("direct")

    def plan(env: _Env) -> list:
        x = env[n.input1_id]
        nb, h, wd, c = _nhwc(x, "convolution")
        if c != groups * icg:
            raise ValueError(f"convolution expects {groups * icg} input channels, found input shape {x.shape}")
        oh, ow = win.out_hw(h, wd)
        y = env.empty(n.output_id, (nb, oh, ow, groups * ocg))
        m = nb * oh * ow
        y2 = y.reshape(m, groups * ocg)
        if minimal and winograd.worth(nb, oh, ow) and packed("winograd") is not None:  # 2.25x fewer products
            bias = g.constants.get(n.bias_id) if n.bias_id != xs.INVALID_VALUE_ID else None
            step = winograd.step(x, packed("winograd"), bias, y, win.top, win.left, *act)
            if step is not None:
                return [step]
        fused = packed("direct") if groups == 1 else None
        if fused is not None and pointwise:
            return [fused.step(x.reshape(m, c), y2)]
        if fused is not None:  # the windows' columns, then the packed GEMM with the bias and clamp
            cols = np.empty((m, k), x.dtype)
            window = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)
            columns = fast.im2col(x, cols, oh, ow, *window) if fast.flat_float32(x) else None
            if columns is not None:
                return [columns, fused.step(cols, y2)]
            xp, steps = win.pad(x, 0.0)
            fill = partial(np.copyto, cols.reshape(nb, oh, ow, win.kh, win.kw, c), win.im2col(xp, oh, ow))
            return [*steps, fill, fused.step(cols, y2)]
        if pointwise and groups == 1:
            steps = [partial(np.matmul, x.reshape(m, c), w[0], out=y2)]
        elif groups == 1:
            steps = _im2col_convolution(x, y2, w[0], win, (oh, ow), env, n.bias_id)
            return steps + _bias_act_steps(y2, env, xs.INVALID_VALUE_ID, act)  # the matmul added the bias
        else:
            steps = _grouped_convolution(x, y2, w, win, groups, oh, ow)
        return steps + _bias_act_steps(y2, env, n.bias_id, act)

    return plan


def _im2col_convolution(
    x: np.ndarray, y2: np.ndarray, w: np.ndarray, win: _Window, out_hw: tuple[int, int], env: _Env, bias_id: int
) -> list:
    """One matmul over a buffer of every window's columns. With a bias, a ones column at the end of each
    row and the bias as the last weight row make the matmul add it, saving a pass over the output."""
    (nb, _, _, c), (oh, ow), k = x.shape, out_hw, w.shape[0]
    xp, steps = win.pad(x, 0.0)
    has_bias = bias_id != xs.INVALID_VALUE_ID
    cols = np.empty((y2.shape[0], k + has_bias), x.dtype)
    if has_bias:
        cols[:, k] = 1
        w = np.concatenate([w, env[bias_id].reshape(1, -1)])
    return steps + [
        partial(np.copyto, cols[:, :k].reshape(nb, oh, ow, win.kh, win.kw, c), win.im2col(xp, oh, ow)),
        partial(np.matmul, cols, w, out=y2),
    ]


def _grouped_convolution(
    x: np.ndarray, y2: np.ndarray, w: np.ndarray, win: _Window, groups: int, oh: int, ow: int
) -> list:
    nb, _, _, c = x.shape
    icg, m = c // groups, nb * oh * ow
    xp, steps = win.pad(x, 0.0)
    windows = win.im2col(xp, oh, ow).reshape(nb, oh, ow, win.kh, win.kw, groups, icg)
    cols = np.empty((groups, nb, oh, ow, win.kh, win.kw, icg), x.dtype)
    out = np.empty((groups, m, w.shape[2]), x.dtype)
    return steps + [
        partial(np.copyto, cols, windows.transpose(5, 0, 1, 2, 3, 4, 6)),
        partial(np.matmul, cols.reshape(groups, m, -1), w, out=out),
        partial(np.copyto, y2.reshape(m, groups, -1), out.transpose(1, 0, 2)),
    ]


@_compiles(xs.XNNDepthwiseConv2d)
def _depthwise_convolution(n: Any, node: xs.XNode, g: _Graph, act: tuple[float, float] = _NO_CLAMP) -> Planner:
    win, channels, mult = _conv_window(n), n.groups, n.group_output_channels
    if n.group_input_channels != 1:
        raise _Unsupported(f"depthwise convolution with {n.group_input_channels} input channels per group")
    # [1, KH, KW, C*mult] -> one [C, mult] weight per tap
    taps = np.ascontiguousarray(g.constant(n.filter_id, "filter").reshape(win.kh * win.kw, channels, mult))
    first_column = np.ascontiguousarray(taps[:, :, 0])

    def plan(env: _Env) -> list:
        x = env[n.input1_id]
        nb, h, wd, c = _nhwc(x, "depthwise convolution")
        if c != channels:
            raise ValueError(f"depthwise convolution expects {channels} channels, found input shape {x.shape}")
        oh, ow = win.out_hw(h, wd)
        y = env.empty(n.output_id, (nb, oh, ow, c * mult))
        if mult == 1 and x.dtype == y.dtype == np.float32:  # one pass with the bias and the clamp (fast.py)
            bias = env[n.bias_id].reshape(-1) if n.bias_id != xs.INVALID_VALUE_ID else np.empty(0, np.float32)
            window = (win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)
            compiled = fast.depthwise(x, first_column, bias, y, *window, np.float32(act[0]), np.float32(act[1]))
            if compiled is not None:
                return [compiled]
        views, steps = win.tap_views(x, 0.0)
        acc = y if mult == 1 else y.reshape(nb, oh, ow, c, mult)
        tmp = np.empty_like(acc)
        for t, view in enumerate(views):
            if mult == 1:  # a weight row per output column lets NumPy run one long inner loop (~20% faster)
                wt = np.ascontiguousarray(np.broadcast_to(taps[t, :, 0], (ow, c)))
            else:
                view, wt = view[..., None], taps[t]
            if t == 0:
                steps.append(partial(np.multiply, view, wt, out=acc))
            else:
                steps += [partial(np.multiply, view, wt, out=tmp), partial(np.add, acc, tmp, out=acc)]
        return steps + _bias_steps(y.reshape(-1, c * mult), env, n.bias_id) + _clamp(y, y, *act)

    return plan


@_compiles(xs.XNNConvTranspose2d)
def _deconvolution(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    win, groups, icg, ocg = _conv_window(n), n.groups, n.group_input_channels, n.group_output_channels
    adj_h, adj_w = n.adjustment_height, n.adjustment_width
    # [OC, KH, KW, ICg] -> per group [ICg, KH*KW*OCg]: x @ w gives every tap's contribution at once.
    w = g.constant(n.filter_id, "filter").reshape(groups, ocg, win.kh, win.kw, icg)
    w = np.ascontiguousarray(w.transpose(0, 4, 2, 3, 1).reshape(groups, icg, win.kh * win.kw * ocg))

    def plan(env: _Env) -> list:
        x = env[n.input1_id]
        nb, h, wd, c = _nhwc(x, "transposed convolution")
        if c != groups * icg:
            raise ValueError(f"transposed convolution expects {groups * icg} channels, found input shape {x.shape}")
        full_h = win.sh * (h - 1) + win.dh * (win.kh - 1) + 1 + adj_h
        full_w = win.sw * (wd - 1) + win.dw * (win.kw - 1) + 1 + adj_w
        oh, ow = full_h - win.top - win.bottom, full_w - win.left - win.right
        y = env.empty(n.output_id, (nb, oh, ow, groups * ocg))
        m = nb * h * wd
        cols = np.empty((groups, m, w.shape[2]), x.dtype)
        full = np.zeros((nb, full_h, full_w, groups, ocg), x.dtype)
        contributions = cols.reshape(groups, nb, h, wd, win.kh, win.kw, ocg).transpose(1, 2, 3, 4, 5, 0, 6)
        steps = [partial(np.matmul, x.reshape(m, groups, icg).transpose(1, 0, 2), w, out=cols), partial(full.fill, 0)]
        for i, j in win.taps():
            r, s = i * win.dh, j * win.dw
            dst = full[:, r : r + win.sh * (h - 1) + 1 : win.sh, s : s + win.sw * (wd - 1) + 1 : win.sw]
            steps.append(partial(np.add, dst, contributions[:, :, :, i, j], out=dst))
        crop = full[:, win.top : win.top + oh, win.left : win.left + ow].reshape(nb, oh, ow, groups * ocg)
        steps.append(partial(np.copyto, y, crop))
        return steps + _bias_steps(y.reshape(-1, groups * ocg), env, n.bias_id)

    return plan


def _pooling(
    n: Any, what: str, fill: float, combine: np.ufunc, env: _Env, compiled: Callable | None = None
) -> tuple[np.ndarray, list, tuple]:
    """Allocate the pooled output and the steps that fold every window tap into it with ``combine``, or the
    fast tier's one pass (``compiled``, as fast.max_pool) when it takes the arrays."""
    win = _pool_window(n)
    x = env[n.input_id]
    nb, h, wd, c = _nhwc(x, what)
    oh, ow = win.out_hw(h, wd)
    y = env.empty(n.output_id, (nb, oh, ow, c))
    one_pass = compiled and compiled(x, y, win.kh, win.kw, win.sh, win.sw, win.dh, win.dw, win.top, win.left)
    if one_pass:
        return y, [one_pass], (win, h, wd, oh, ow)
    views, steps = win.tap_views(x, fill)
    for t, view in enumerate(views):
        steps.append(partial(np.copyto, y, view) if t == 0 else partial(combine, y, view, out=y))
    return y, steps, (win, h, wd, oh, ow)


@_compiles(xs.XNNMaxPooling2d)
def _max_pooling(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    return lambda env: _pooling(n, "max pooling", -np.inf, np.maximum, env, fast.max_pool)[1]


@_compiles(xs.XNNAvgPooling2d)
def _average_pooling(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    def plan(env: _Env) -> list:
        y, steps, geometry = _pooling(n, "average pooling", 0.0, np.add, env)
        return steps + [partial(np.multiply, y, _pool_scale(*geometry, y.dtype), out=y)]

    return plan


def _pool_scale(win: _Window, h: int, w: int, oh: int, ow: int, dtype: np.dtype) -> np.ndarray:
    """1 / the number of in-bounds elements under each window (padding is not counted), as [OH, OW, 1]."""
    ones = np.zeros((1, h + win.top + win.bottom, w + win.left + win.right, 1), dtype)
    ones[:, win.top : win.top + h, win.left : win.left + w] = 1
    count = sum(win.tap(ones, i, j, oh, ow) for i, j in win.taps())
    return (1.0 / count[0]).astype(dtype)


@_compiles(xs.XNNGlobalAvgPooling2d)
def _global_average_pooling(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    keep = bool(n.flags & xs.FLAG_KEEP_DIMS)

    def plan(env: _Env) -> list:
        x = env[n.input_id]
        if x.ndim < 3:
            raise ValueError(f"global average pooling expects an input with spatial dims, found shape {x.shape}")
        axes = tuple(range(1, x.ndim - 1))
        kept = (x.shape[0],) + (1,) * len(axes) + (x.shape[-1],)
        y = env.empty(n.output_id, kept if keep else (x.shape[0], x.shape[-1]))
        yk = y.reshape(kept)
        scale = y.dtype.type(1.0 / math.prod(x.shape[a] for a in axes))
        return [partial(np.add.reduce, x, axis=axes, keepdims=True, out=yk), partial(np.multiply, yk, scale, out=yk)]

    return plan


_BINARY = {
    xs.XNNAdd: np.add,
    xs.XNNSubtract: np.subtract,
    xs.XNNMultiply: np.multiply,
    xs.XNNDiv: np.divide,
    xs.XNNMinimum: np.minimum,
    xs.XNNMaximum: np.maximum,
}


@_compiles(*_BINARY)
def _binary(n: Any, node: xs.XNode, g: _Graph, act: tuple[float, float] = _NO_CLAMP) -> Planner:
    ufunc = _BINARY[type(n)]

    def plan(env: _Env) -> list:
        a, b = env[n.input1_id], env[n.input2_id]
        y = env.empty(n.output_id, np.broadcast_shapes(a.shape, b.shape))
        if ufunc is np.add and act != _NO_CLAMP:  # a residual add and its ReLU: one pass in the fast tier
            fused = fast.add_clamp(a, b, y, *act)
            if fused is not None:
                return [fused]
        return [partial(ufunc, a, b, out=y), *_clamp(y, y, *act)]

    return plan


@_compiles(xs.XNNPReLU)
def _prelu(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    def plan(env: _Env) -> list:
        x, slope = env[n.input1_id], env[n.input2_id]
        y = env.empty(n.output_id, x.shape)
        neg = np.empty_like(y)
        return [
            *_clamp(x, neg, -math.inf, 0.0),
            partial(np.multiply, neg, slope, out=neg),
            *_clamp(x, y, 0.0, math.inf),
            partial(np.add, y, neg, out=y),
        ]

    return plan


_A_S = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)  # Abramowitz & Stegun 7.1.26


def _gelu(x: np.ndarray, y: np.ndarray) -> list:
    """Exact (erf) GELU, with erfc from the Abramowitz-Stegun fit (error below 2e-7).

    x * Phi(x) = max(x, 0) - |x| * erfc(|x| / sqrt2) / 2 for either sign of x, which needs no copysign
    (the slowest ufunc here); the 1/2 is folded into the fit's coefficients.
    """
    fused = fast.rows_step("gelu", x.reshape(-1), y.reshape(-1)) if fast.flat_float32(x, y) else None
    if fused is not None:  # the fast tier: one pass (0.22 ms against 0.48 ms on ViT-tiny's 197 x 768)
        return [fused]
    a, t = np.empty_like(y), np.empty_like(y)
    f = y.dtype.type
    steps = [
        partial(np.abs, x, out=a),
        partial(np.multiply, a, f(0.3275911 / math.sqrt(2.0)), out=t),
        partial(np.add, t, f(1), out=t),
        partial(np.divide, f(1), t, out=t),  # faster than np.reciprocal
        partial(np.multiply, t, f(_A_S[4] / 2), out=y),
    ]
    for c in reversed(_A_S[:4]):
        steps += [partial(np.add, y, f(c / 2), out=y), partial(np.multiply, y, t, out=y)]
    return steps + [  # y * exp(-x^2 / 2) = erfc(|x| / sqrt2) / 2
        partial(np.square, x, out=t),
        partial(np.multiply, t, f(-0.5), out=t),
        partial(np.exp, t, out=t),
        partial(np.multiply, y, t, out=y),
        partial(np.multiply, y, a, out=y),
        *_clamp(x, a, 0.0, math.inf),
        partial(np.subtract, a, y, out=y),
    ]


def _sigmoid(x: np.ndarray, y: np.ndarray) -> list:
    return [
        partial(np.negative, x, out=y),
        partial(np.exp, y, out=y),
        partial(np.add, y, y.dtype.type(1), out=y),
        partial(np.reciprocal, y, out=y),
    ]


def _hardswish(x: np.ndarray, y: np.ndarray) -> list:
    f = y.dtype.type
    return [
        partial(np.add, x, f(3), out=y),
        partial(np.clip, y, f(0), f(6), out=y),
        partial(np.multiply, y, x, out=y),
        partial(np.multiply, y, f(1 / 6), out=y),
    ]


def _rsqrt(x: np.ndarray, y: np.ndarray) -> list:
    return [partial(np.sqrt, x, out=y), partial(np.reciprocal, y, out=y)]


def _ufunc(f: np.ufunc) -> Callable[[np.ndarray, np.ndarray], list]:
    return lambda x, y: [partial(f, x, out=y)]


_UNARY: dict[type, Callable[[np.ndarray, np.ndarray], list]] = {
    xs.XNNAbs: _ufunc(np.abs),
    xs.XNNNegate: _ufunc(np.negative),
    xs.XNNFloor: _ufunc(np.floor),
    xs.XNNCeiling: _ufunc(np.ceil),
    xs.XNNSquare: _ufunc(np.square),
    xs.XNNSquareRoot: _ufunc(np.sqrt),
    xs.XNNExp: _ufunc(np.exp),
    xs.XNNLog: _ufunc(np.log),
    xs.XNNTanh: _ufunc(np.tanh),
    xs.XNNSin: _ufunc(np.sin),
    xs.XNNCos: _ufunc(np.cos),
    xs.XNNSigmoid: _sigmoid,
    xs.XNNHardswish: _hardswish,
    xs.XNNReciprocalSquareRoot: _rsqrt,
    xs.XNNGelu: _gelu,
}


def _elementwise(kernel: Callable[[np.ndarray, np.ndarray], list]) -> Callable:
    def compile_node(n: Any, node: xs.XNode, g: _Graph) -> Planner:
        def plan(env: _Env) -> list:
            x = env[n.input_id]
            return kernel(x, env.empty(n.output_id, x.shape))

        return plan

    return compile_node


for _kind, _kernel in _UNARY.items():
    _COMPILERS[_kind] = _elementwise(_kernel)


@_compiles(xs.XNNClamp)
def _clamp_node(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    lo, hi = _min_max(node)
    return _elementwise(lambda x, y: _clamp(x, y, lo, hi))(n, node, g)


@_compiles(xs.XNNLeakyReLU)
def _leaky_relu(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    def kernel(x: np.ndarray, y: np.ndarray) -> list:
        slope = y.dtype.type(n.negative_slope)
        pick = np.maximum if n.negative_slope <= 1 else np.minimum  # slope*x is the smaller branch when x > 0
        return [partial(np.multiply, x, slope, out=y), partial(pick, x, y, out=y)]

    return _elementwise(kernel)(n, node, g)


@_compiles(xs.XNNELU)
def _elu(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    def kernel(x: np.ndarray, y: np.ndarray) -> list:
        neg = np.empty_like(y)
        return [
            *_clamp(x, neg, -math.inf, 0.0),
            partial(np.expm1, neg, out=neg),
            partial(np.multiply, neg, y.dtype.type(n.alpha), out=neg),
            *_clamp(x, y, 0.0, math.inf),
            partial(np.add, y, neg, out=y),
        ]

    return _elementwise(kernel)(n, node, g)


@_compiles(xs.XNNConvert)
def _convert(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    return _elementwise(lambda x, y: [partial(np.copyto, y, x, casting="unsafe")])(n, node, g)


@_compiles(xs.XNNCopy)
def _copy(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    # Values are never written after they are produced, so a copy can share its input's memory.
    def plan(env: _Env) -> list:
        env.alias(n.output_id, n.input_id, env[n.input_id])
        return []

    return plan


@_compiles(xs.XNNSoftmax)
def _softmax(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    def plan(env: _Env) -> list:
        x = env[n.input_id]
        y = env.empty(n.output_id, x.shape)
        return _softmax_steps(x, y)

    return plan


def _softmax_steps(x: np.ndarray, y: np.ndarray) -> list:
    """Softmax over the last axis of x into y (x may be y)."""
    if fast.flat_float32(x, y) and x.ndim:
        fused = fast.rows_step("softmax", x.reshape(-1, x.shape[-1]), y.reshape(-1, x.shape[-1]), False)
        if fused is not None:  # the fast tier: one pass a row
            return [fused]
    red = np.empty(x.shape[:-1] + (1,), y.dtype)
    return [
        partial(np.maximum.reduce, x, axis=-1, keepdims=True, out=red),
        partial(np.subtract, x, red, out=y),
        partial(np.exp, y, out=y),
        partial(np.add.reduce, y, axis=-1, keepdims=True, out=red),
        partial(np.divide, y, red, out=y),
    ]


@_compiles(xs.XNNStaticTranspose)
def _transpose(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    perm = tuple(n.perm)

    def plan(env: _Env) -> list:
        x = env[n.input_id]
        view = x.transpose(perm)
        y = env.empty(n.output_id, view.shape)
        runs = fast.permute(x, view, y) if view.ndim and view.shape[-1] >= 8 else None  # runs of 8 or more
        if runs is not None:  # the fast tier: runs of the last axis, over the threads
            return [runs]
        if 1 < view.shape[-1] <= _SHORT_LAST_AXIS and view.ndim > 1 and view.strides[-1] != view.itemsize:
            # NCHW -> NHWC of an image (C = 3): one copy per channel, each reading a plane in order (57 us for
            # 224 x 224 x 3), instead of NumPy's loop over C-long rows gathered from three planes (241 us)
            return [partial(np.copyto, y[..., i], view[..., i]) for i in range(view.shape[-1])]
        return [partial(np.copyto, y, view)]

    return plan


_SHORT_LAST_AXIS = 8


@_compiles(xs.XNNStaticReshape)
def _reshape(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    shape = tuple(-1 if d == 0 else d for d in n.new_shape)  # 0 marks the dimension to infer
    if shape.count(-1) > 1:
        raise _Unsupported(f"reshape to {list(n.new_shape)} infers more than one dimension")

    def plan(env: _Env) -> list:
        # Every array a plan holds is C-contiguous, so the reshape is a view and costs no step.
        env.alias(n.output_id, n.input_id, env[n.input_id].reshape(shape))
        return []

    return plan


@_compiles(xs.XNNStaticConstantPad)
def _constant_pad(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    pre, post = list(n.pre_paddings), list(n.post_paddings)

    def plan(env: _Env) -> list:
        x = env[n.input_id]
        if len(pre) != x.ndim or len(post) != x.ndim:
            raise ValueError(f"constant pad has {len(pre)}-d paddings for an input of shape {x.shape}")
        y = env.empty(n.output_id, [d + a + b for d, a, b in zip(x.shape, pre, post)], persistent=True)
        y.fill(n.padding_value)  # the border is written once; each run refills only the interior
        inner = y[tuple(slice(a, a + d) for a, d in zip(pre, x.shape))]
        return [partial(np.copyto, inner, x)]

    return plan


@_compiles(xs.XNNConcatenate2, xs.XNNConcatenate3, xs.XNNConcatenate4, xs.XNNConcatenate5)
def _concatenate(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    count = {xs.XNNConcatenate2: 2, xs.XNNConcatenate3: 3, xs.XNNConcatenate4: 4, xs.XNNConcatenate5: 5}[type(n)]
    ids = [n.input1_id, n.input2_id, n.input3_id, n.input4_id, n.input5_id][:count]

    def plan(env: _Env) -> list:
        xs_ = [env[i] for i in ids]
        axis = n.axis
        shape = list(xs_[0].shape)
        shape[axis] = sum(x.shape[axis] for x in xs_)
        y = env.empty(n.output_id, shape)
        steps, start = [], 0
        for x in xs_:
            index = (slice(None),) * axis + (slice(start, start + x.shape[axis]),)
            steps.append(partial(np.copyto, y[index], x))
            start += x.shape[axis]
        return steps

    return plan


@_compiles(xs.XNNStaticSlice)
def _slice(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    offsets, sizes = list(n.offsets), list(n.sizes)

    def plan(env: _Env) -> list:
        x = env[n.input_id]
        if len(offsets) != x.ndim:
            raise ValueError(f"slice has {len(offsets)} offsets for an input of shape {x.shape}")
        index = tuple(slice(o, d if s == 0 else o + s) for o, s, d in zip(offsets, sizes, x.shape))
        view = x[index]
        return [partial(np.copyto, env.empty(n.output_id, view.shape), view)]

    return plan


@_compiles(xs.XNNBatchMatrixMultiply)
def _batch_matmul(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    transpose_b = bool(n.flags & xs.FLAG_TRANSPOSE_B)

    def plan(env: _Env) -> list:
        a, b = env[n.input1_id], env[n.input2_id]
        if transpose_b:
            b = b.swapaxes(-1, -2)
        if a.shape[-1] != b.shape[-2]:
            raise ValueError(f"batch matmul of shapes {a.shape} and {b.shape} does not line up")
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        y = env.empty(n.output_id, batch + (a.shape[-2], b.shape[-1]))
        packed = gemm.batch_matmul(a, b, y) if fast.usable() else None
        return [partial(np.matmul, a, b, out=y) if packed is None else packed]

    return plan


@_compiles(xs.XNNStaticResizeBilinear2D)
def _resize_bilinear(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    def plan(env: _Env) -> list:
        x = env[n.input_id]
        nb, h, w, c = _nhwc(x, "bilinear resize")
        oh, ow = n.new_height, n.new_width
        y = env.empty(n.output_id, (nb, oh, ow, c))
        h0, h1, fh = _resize_taps(h, oh, n.flags, x.dtype)
        w0, w1, fw = _resize_taps(w, ow, n.flags, x.dtype)
        rows, other = np.empty((nb, oh, w, c), x.dtype), np.empty((nb, oh, w, c), x.dtype)
        tmp = np.empty_like(y)
        take = partial(np.take, mode="clip")
        return [
            partial(take, x, h0, axis=1, out=rows),
            partial(take, x, h1, axis=1, out=other),
            partial(np.subtract, other, rows, out=other),
            partial(np.multiply, other, fh[:, None, None], out=other),
            partial(np.add, rows, other, out=rows),
            partial(take, rows, w0, axis=2, out=y),
            partial(take, rows, w1, axis=2, out=tmp),
            partial(np.subtract, tmp, y, out=tmp),
            partial(np.multiply, tmp, fw[:, None], out=tmp),
            partial(np.add, y, tmp, out=y),
        ]

    return plan


def _resize_taps(size: int, out: int, flags: int, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each output index: the two source indices and the weight of the second."""
    dst = np.arange(out, dtype=np.float64)
    if flags & xs.FLAG_ALIGN_CORNERS:
        src = dst * ((size - 1) / (out - 1) if out > 1 else 0.0)
    elif flags & xs.FLAG_TENSORFLOW_LEGACY_MODE:
        src = dst * (size / out)
    else:
        src = np.maximum((dst + 0.5) * (size / out) - 0.5, 0.0)
    lo = np.minimum(np.floor(src).astype(np.intp), size - 1)
    hi = np.minimum(lo + 1, size - 1)
    return lo, hi, (src - lo).astype(dtype)


@_compiles(xs.XNNScaledDotProductAttention)
def _attention(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    # XNNPACK's attention: softmax((query * scale) @ key^T + mask) @ value, scale per channel, mask [T, U].
    def plan(env: _Env) -> list:
        q, k, v = env[n.query_id], env[n.key_id], env[n.value_id]
        scale, mask = env[n.scale_id], env[n.mask_id]
        if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
            raise ValueError(f"attention shapes do not line up: query {q.shape}, key {k.shape}, value {v.shape}")
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
        qs = np.empty(q.shape, q.dtype)
        scores = np.empty(batch + (q.shape[-2], k.shape[-2]), q.dtype)
        y = env.empty(n.output_id, batch + (q.shape[-2], v.shape[-1]))
        return [
            partial(np.multiply, q, scale, out=qs),
            partial(np.matmul, qs, k.swapaxes(-1, -2), out=scores),
            partial(np.add, scores, mask, out=scores),
            *_softmax_steps(scores, scores),
            partial(np.matmul, scores, v, out=y),
        ]

    return plan


# ---------------------------------------------------------------------- quantized nodes
#
# Quantized values hold integers q standing for (q - zero_point) * scale. Fully connected
# and convolution run XNNPACK's integer arithmetic with float32 BLAS on integer-valued
# float32 arrays (qgemm.py states why that is exact and what the other options cost). A
# static fully connected multiplies the raw int8/uint8 input (|q| <= 256) by the weights
# with the bias, corrected for the input zero point (bias - zero_point * sum_k w[k, n]),
# as one more weight row, so one sgemm yields XNNPACK's int32 accumulator exactly when
# every column's L1 bound allows, else exact K-chunks summed in float64. A static
# convolution runs the float planner on centred integers (|x - zero_point| <= 255) and
# its bias; its single sgemm is exact under the same bound (MobileNetV2's convolutions meet
# it, ResNet-18's deepest do not); where it fails, the float32 rounding of a sum above 2**24
# is a relative 6e-8, which can move the requantized output only at a rounding tie.
# XNNPACK's fp32 requantization follows: multiply by input_scale * weight_scale /
# output_scale in float32, clamp, round half to even, add the output zero point.
# Dynamically quantized nodes (float output) multiply the dequantized input by weights
# dequantized once at load (per-channel int8 or blockwise 4-bit), with the bias row: the
# float result differs from XNNPACK's only by float32 rounding. A clamp between equal
# quantization parameters clips the integers; other ops on quantized values (add,
# pooling, transposes, ...) run their float kernel on dequantized values and requantize
# their output, which matches XNNPACK's fixed-point kernels within one step.
# Between quantized nodes a per-tensor (or dynamic) quantized value travels as float32
# centred integers q - zero_point (``_Env.centred``): its producer stops after rounding and
# its readers skip the int8 -> float conversion; a static fully connected then uses the
# plain bias (|q - zero_point| <= 255). int8 arrays are written only for the graph's
# outputs and for converts, which read the integers themselves.
# With the [fast] tier (qfast.py) a static node's requantization (its int32 bias included), a
# static add and a dynamic convert (which also fills its fully connected's input buffer) each
# run as one compiled pass with the NumPy path's float32 operations in its order: same bits.


def _qrange(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _quantize_steps(
    y: np.ndarray, q: np.ndarray, scale: Any, zero_point: int, lo: float, hi: float, dest: tuple | None = None
) -> list:
    """Steps writing round_half_even(y / scale) + zero_point into ``q``, clamped to q's range and [lo, hi].

    With ``dest`` = (env, value id) the float32 centred integers q - zero_point are also recorded as
    ``env.centred[value id]`` for the readers that take them (convolution, fully connected, clamp and
    the dequantizing fallback skip a conversion and a subtraction); when no reader needs the integers
    themselves (the graph's outputs and converts do), ``q`` is not written at all.
    """
    qmin, qmax = _qbounds(q.dtype, scale, zero_point, lo, hi)
    if dest is not None and dest[1] in dest[0].graph.narrow:
        a, b = dest[0].graph.narrow[dest[1]]
        qmin, qmax = max(qmin, a), min(qmax, b)
        dest[0].narrowed.add(dest[1])
    t = np.empty(y.shape, np.float32) if dest is None else dest[0].centred_buffer(dest[1], y.shape)
    steps, src = [], y
    if scale != 1:
        steps.append(partial(np.multiply, y, np.float32(1.0) / np.float32(scale), out=t))
        src = t
    # Clamping before rounding equals clamping after: the bounds are integers.
    steps += [
        partial(np.clip, src, np.float32(qmin - zero_point), np.float32(qmax - zero_point), out=t),
        partial(np.rint, t, out=t),
    ]
    if dest is not None:
        env, vid = dest
        if vid not in env.graph.needs_int8:
            return steps
        t2 = np.empty(y.shape, np.float32)
        if zero_point:
            return steps + [
                partial(np.add, t, np.float32(zero_point), out=t2),
                partial(np.copyto, q, t2, casting="unsafe"),
            ]
        return steps + [partial(np.copyto, q, t, casting="unsafe")]
    if zero_point:
        steps.append(partial(np.add, t, np.float32(zero_point), out=t))
    return steps + [partial(np.copyto, q, t, casting="unsafe")]


def _centred_input(env: _Env, vid: int, qp: _QParams, dst_id: int) -> tuple[np.ndarray, list]:
    """Value ``vid`` as float32 centred integers under id ``dst_id``: shared if its producer kept them."""
    c = env.centred.get(vid)
    if c is not None:
        env.arrays[dst_id] = c
        return c, []
    x = env[vid]
    xc = env.empty(dst_id, x.shape)
    return xc, [partial(np.subtract, x, np.float32(qp.zero_point), out=xc)]


def _qbounds(dtype: np.dtype, scale: Any, zero_point: int, lo: float, hi: float) -> tuple[int, int]:
    """The integer range of a quantized output: its dtype's, narrowed by a float clamp [lo, hi]."""
    qmin, qmax = _qrange(dtype)
    if lo != -math.inf:
        qmin = max(qmin, int(np.rint(np.float32(lo) / scale)) + zero_point)
    if hi != math.inf:
        qmax = min(qmax, int(np.rint(np.float32(hi) / scale)) + zero_point)
    return qmin, qmax


def _dequantize_steps(q: np.ndarray, f: np.ndarray, qp: _QParams) -> list:
    return [partial(np.subtract, q, np.float32(qp.zero_point), out=f), partial(np.multiply, f, qp.scale, out=f)]


def _dynamic_params(x2: np.ndarray, scale: np.ndarray, zero_point: np.ndarray) -> None:
    """XNNPACK's per-row int8 parameters for ``x2`` [rows, K]: the range widened to hold 0, zero point nudged."""
    lo = np.minimum(x2.min(axis=1, keepdims=True), 0).astype(np.float32)
    hi = np.maximum(x2.max(axis=1, keepdims=True), 0).astype(np.float32)
    flat = lo == hi
    s = np.where(flat, np.float32(1), (hi - lo) / np.float32(255)).astype(np.float32)
    zp = np.where(lo / s + hi / s > -1, -128 - lo / s, 127 - hi / s)
    np.clip(np.rint(zp), -128, 127, out=zero_point)
    np.copyto(scale, s)


_NO_ROWS = np.empty((0, 0), np.float32)


def _dynamic_convert(
    x: np.ndarray,
    centred: np.ndarray,
    q: np.ndarray | None,
    scale: np.ndarray,
    zero_point: np.ndarray,
    dequantized: np.ndarray = _NO_ROWS,
) -> None:
    """Per-row int8 quantization of ``x``: float32 q - zero_point into ``centred``, and q into ``q`` if given.
    A ``dequantized`` [rows, K + 1] buffer (compiled tier only) also gets (q - zero_point) * scale."""
    x2 = x.reshape(scale.shape[0], -1)
    if qfast.available() and x2.flags.c_contiguous and centred.flags.c_contiguous:
        qfast.dynamic_quantize()(x2, centred.reshape(x2.shape), scale, zero_point, dequantized)  # same bits
        if q is not None:
            np.copyto(q.reshape(x2.shape), centred.reshape(x2.shape) + zero_point, casting="unsafe")
        return
    _dynamic_params(x2, scale, zero_point)
    t = centred.reshape(x2.shape)
    np.divide(x2, scale, out=t)
    np.rint(t, out=t)
    np.clip(t, -128 - zero_point, 127 - zero_point, out=t)
    if q is not None:
        np.copyto(q.reshape(x2.shape), t + zero_point, casting="unsafe")


def _quantized_convert(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)

    def plan(env: _Env) -> list:
        x = env[n.input_id]
        y = env.empty(n.output_id, x.shape)
        if qin is not None and qout is None:
            return _dequantize_steps(x, y, qin)
        if qin is None and qout is not None and qout.scale is None:
            rows = math.prod(x.shape[: x.ndim - qout.nonbatch_dims])
            scale, zp = np.empty((rows, 1), np.float32), np.empty((rows, 1), np.float32)
            env.dynamic[n.output_id] = (scale, zp)
            c = env.centred_buffer(n.output_id, x.shape)
            deq = _NO_ROWS
            if qfast.available() and n.output_id in g.fc_inputs:
                # The fully connected's input buffer, filled in the same pass; not pooled.
                deq, ones = env.ones_column(rows, x.size // max(rows, 1))
                env.fc_input[n.output_id] = deq
            q = y if n.output_id in g.needs_int8 else None
            return [partial(_dynamic_convert, x, c, q, scale, zp, deq)] + ([ones] if deq.size else [])
        dest = (env, n.output_id)
        if qin is None:
            return _quantize_steps(x, y, qout.scale, qout.zero_point, -math.inf, math.inf, dest)
        f = np.empty(x.shape, np.float32)
        quantize = _quantize_steps(f, y, qout.scale, qout.zero_point, -math.inf, math.inf, dest)
        return _dequantize_steps(x, f, qin) + quantize

    return plan


def _unpack_int4(packed: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """[rows, cols] signed 4-bit weights from XNNPACK's packing: two a byte along cols, low nibble first, +8."""
    b = packed.reshape(rows, (cols + 1) // 2)
    w = np.empty((rows, b.shape[1] * 2), np.int8)
    w[:, 0::2] = b & 0xF
    w[:, 1::2] = b >> 4
    return w[:, :cols] - 8


def _requantize_steps(
    acc: np.ndarray,
    bias: np.ndarray | None,
    factor: np.ndarray,
    q: np.ndarray,
    qp: _QParams,
    node: xs.XNode,
    dest: tuple | None = None,
) -> list:
    """XNNPACK's fp32 requantization of the int32 accumulator ``acc`` (+ bias) into ``q``."""
    lo, hi = _min_max(node)
    lo, hi = (lo / qp.scale if lo != -math.inf else lo), (hi / qp.scale if hi != math.inf else hi)
    if qfast.available() and dest is not None and acc.flags.c_contiguous:
        return _fused_requantize_steps(acc, bias, factor, q, qp.zero_point, lo, hi, dest)
    steps = []
    if bias is not None:
        steps.append(partial(np.add, acc, bias, out=acc))
    steps.append(partial(np.multiply, acc, factor, out=acc))
    return steps + _quantize_steps(acc, q, np.float32(1), qp.zero_point, lo, hi, dest)


def _fused_requantize_steps(
    acc: np.ndarray,
    bias: np.ndarray | None,
    factor: np.ndarray,
    q: np.ndarray,
    zp: int,
    lo: float,
    hi: float,
    dest: tuple,
) -> list:
    """``_requantize_steps`` as one compiled pass (qfast.py) writing the centred integers: the same
    float32 operations in the same order (bias add, scale, clip to the integer bounds, round half to
    even), so the same bits; then the int8 copy when a reader needs it, as on the NumPy path."""
    c = factor.shape[-1]
    b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias, np.float32).reshape(-1)
    f = np.ascontiguousarray(factor, np.float32).reshape(-1)

    def step(t: np.ndarray, qlo: np.float32, qhi: np.float32) -> Step:
        return partial(qfast.requantize(), acc.reshape(-1, c), b, f, qlo, qhi, t.reshape(-1, c))

    return _fused_quantize_out(dest, q, zp, np.float32(1), lo, hi, acc.shape, step)


def _fused_quantize_out(
    dest: tuple, q: np.ndarray, zp: int, scale: Any, lo: float, hi: float, shape: tuple, step: Callable
) -> list:
    """The steps of a compiled pass ``step(t, qlo, qhi)`` that writes value ``dest[1]``'s centred integers
    into ``t``, clipped to [qlo, qhi] (its dtype's range, narrowed by [lo, hi] and by a following clamp as
    ``_quantize_steps`` does), then the int8 copy when a reader needs the integers themselves."""
    env, vid = dest
    qmin, qmax = _qbounds(q.dtype, scale, zp, lo, hi)
    if vid in env.graph.narrow:
        a, b = env.graph.narrow[vid]
        qmin, qmax = max(qmin, a), min(qmax, b)
        env.narrowed.add(vid)
    t = env.centred_buffer(vid, shape)
    steps = [step(t, np.float32(qmin - zp), np.float32(qmax - zp))]
    if vid not in env.graph.needs_int8:
        return steps
    t2 = np.empty(shape, np.float32)
    return steps + [partial(np.add, t, np.float32(zp), out=t2), partial(np.copyto, q, t2, casting="unsafe")]


def _fused_add(n: Any, node: xs.XNode, g: _Graph, env: _Env) -> list | None:
    """A static int8 add as one compiled pass (qfast.py), when both inputs are centred integers of one
    shape and the output is quantized per tensor: the dequantizing fallback's float32 operations in its
    order (each input times its scale, the sum, the node's float clamp, times 1 / output scale, clip,
    round half to even), so the same bits. None when the case does not apply."""
    qa, qb, qy = g.quant.get(n.input1_id), g.quant.get(n.input2_id), g.quant.get(n.output_id)
    if qy is None or qy.scale is None or np.ndim(qy.scale) or qa is None or qb is None:
        return None
    a, b = env.centred.get(n.input1_id), env.centred.get(n.input2_id)
    if a is None or b is None or a.shape != b.shape or not (a.flags.c_contiguous and b.flags.c_contiguous):
        return None
    flo, fhi = (np.float32(v) for v in _min_max(node))
    inv = np.float32(1.0) / np.float32(qy.scale)
    sa, sb = np.float32(qa.scale), np.float32(qb.scale)
    q = env.empty(n.output_id, a.shape)

    def step(t: np.ndarray, qlo: np.float32, qhi: np.float32) -> Step:
        flat = t.reshape(-1)
        return partial(qfast.quantized_add(), a.reshape(-1), sa, b.reshape(-1), sb, flo, fhi, inv, qlo, qhi, flat)

    return _fused_quantize_out((env, n.output_id), q, qy.zero_point, qy.scale, -math.inf, math.inf, a.shape, step)


def _weight_scale(qp: _QParams, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(qp.scale, np.float32).reshape(-1), (channels,)).astype(np.float32)


def _quantized_fully_connected(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    wq = g.quant.get(n.filter_id)
    if wq is None or n.filter_id not in g.constants:
        raise _Unsupported("a quantized fully connected needs constant quantized weights")
    dims = list(g.value(n.filter_id).dims)
    transposed = bool(n.flags & xs.FLAG_TRANSPOSE_WEIGHTS)
    oc, ic = (dims[1], dims[0]) if transposed else (dims[0], dims[1])
    xq, yq = g.quant.get(n.input1_id), g.quant.get(n.output_id)
    if xq is None:
        raise _Unsupported("a fully connected with quantized weights needs a quantized input")
    bias = None
    if n.bias_id != xs.INVALID_VALUE_ID:
        bias = g.constant(n.bias_id, "bias").reshape(-1)
        bias = bias.astype(np.float32) if n.bias_id in g.quant else bias
    four_bit = g.value(n.filter_id).datatype == xs.XNNDatatype.xnn_datatype_qbint4
    if xq.scale is None:  # dynamic int8 input, float output
        return _dynamic_fully_connected(n, node, g, wq, bias, (ic, oc), transposed, four_bit)
    if four_bit or yq is None:
        raise _Unsupported("static int8 fully connected needs int8 weights and a quantized output")
    w = g.constants[n.filter_id].astype(np.float32) - np.float32(wq.zero_point)
    w, wscale = (w if transposed else w.T), _weight_scale(wq, oc)  # centred integers [in, out]
    # The raw input q times w, with the zero point's share sum_k zp * w[k, n] taken off the bias.
    w0 = w
    correction = np.float64(xq.zero_point) * w.astype(np.float64).sum(axis=0)
    waug = qgemm.with_bias_row(w, (0 if bias is None else bias.astype(np.float64)) - correction)
    xmax = float(max(-_qrange(g.dtype(n.input1_id))[0], _qrange(g.dtype(n.input1_id))[1]))
    bound = waug.copy()
    bound[ic] /= xmax  # the bias row multiplies a column of ones, not an input
    splits = qgemm.exact_splits(bound, xmax)
    factor = (np.float32(xq.scale) * wscale / np.float32(yq.scale)).astype(np.float32)
    centred: list = []  # (weights with the plain bias, splits), made when a plan first has centred input

    def plan(env: _Env) -> list:
        x = env.centred.get(n.input1_id)
        w, cuts = waug, splits
        if x is not None:
            if not centred:
                plain = qgemm.with_bias_row(w0, bias)
                bound = plain.copy()
                bound[ic] /= 256
                centred.append((plain, qgemm.exact_splits(bound, 256.0)))
            w, cuts = centred[0]
        else:
            x = env[n.input1_id]
        x2 = x.reshape(-1, ic)
        xa, ones = env.ones_column(x2.shape[0], ic)
        y = env.empty(n.output_id, x.shape[:-1] + (oc,))
        acc = env.cursor.take((x2.shape[0], oc), np.dtype(np.float32))
        steps = [ones, partial(np.copyto, xa[:, :ic], x2)] + qgemm.matmul_steps(xa, w, acc, cuts)
        return steps + _requantize_steps(acc, None, factor, y.reshape(-1, oc), yq, node, (env, n.output_id))

    return plan


def _float_weights(g: _Graph, n: Any, wq: _QParams, shape: tuple[int, int], transposed: bool, four_bit: bool):
    """A dynamically quantized fully connected's weights dequantized to float32 [in, out]."""
    ic, oc = shape
    if four_bit:
        w = _unpack_int4(g.constants[n.filter_id], oc, ic).astype(np.float32)
        return (w.reshape(oc, ic // wq.group_size, wq.group_size) * wq.scale[:, :, None]).reshape(oc, ic).T
    w = g.constants[n.filter_id].astype(np.float32) - np.float32(wq.zero_point)
    return (w if transposed else w.T) * _weight_scale(wq, oc)


def _integer_weights(
    g: _Graph, n: Any, wq: _QParams, bias: np.ndarray | None, shape: tuple[int, int], transposed: bool, four_bit: bool
) -> qgemv.IntegerLinear | None:
    """The weights for the compiled integer GEMV (qgemv.py), or None when the tier is off or the layout is one
    it does not take (the node then dequantizes them at load)."""
    ic, oc = shape
    if four_bit:
        block = wq.group_size
        if transposed or ic % 2 or block % 2 or ic % block or wq.scale.shape != (oc, ic // block):
            return None
        packed = np.asarray(g.constants[n.filter_id]).reshape(oc, ic // 2)
        return qgemv.IntegerLinear.qb4w(packed, wq.scale, block, oc, ic, bias, _keeps_floats(g))
    if wq.zero_point != 0:
        return None
    w = np.asarray(g.constants[n.filter_id]).reshape((ic, oc) if transposed else (oc, ic))
    return qgemv.IntegerLinear.qc8w(w.T if transposed else w, _weight_scale(wq, oc), bias, _keeps_floats(g))


def _keeps_floats(g: _Graph) -> bool:
    """Whether a layer called with more rows than its GEMV takes keeps its float32 weights after the first
    such call: when the program's weights (its named data) are small (the policy's ``gemv_float_budget``)."""
    return g.named_bytes <= policy.current().gemv_float_budget


def _dynamic_fully_connected(
    n: Any,
    node: xs.XNode,
    g: _Graph,
    wq: _QParams,
    bias: np.ndarray | None,
    shape: tuple[int, int],
    transposed: bool,
    four_bit: bool,
) -> Planner:
    """Dynamically quantized input [rows, ic] (per-row scale and zero point) times quantized weights.

    With the [fast] tier the weights stay integers: up to ``max_rows`` input rows (a decode step) run the
    integer GEMV of qgemv.py; a larger input (a prefill) runs sgemm on the weights dequantized, kept after the
    first such call in a small model, redone per call in a large one (see the policy's ``gemv_float_budget``). Without the tier
    they are dequantized once, at load, and every call runs sgemm."""
    ic, oc = shape
    integer = _integer_weights(g, n, wq, bias, shape, transposed, four_bit)
    waug = (
        None
        if integer is not None
        else qgemm.with_bias_row(_float_weights(g, n, wq, shape, transposed, four_bit), bias)
    )

    def plan(env: _Env) -> list:
        x = env[n.input1_id]
        x2 = x.reshape(-1, ic)
        scale, zp = env.dynamic[n.input1_id]
        y = env.empty(n.output_id, x.shape[:-1] + (oc,))
        y2 = y.reshape(-1, oc)
        c = env.centred.get(n.input1_id)
        lo, hi = _min_max(node)
        clamp = _clamp(y2, y2, lo, hi)  # no steps without a clamp
        if integer is not None and x2.shape[0] <= integer.max_rows:
            if c is not None and c.flags.c_contiguous:
                return integer.steps(c.reshape(x2.shape), scale, y2, lo, hi)
            xc = np.empty(x2.shape, np.float32)
            return [partial(np.subtract, x2, zp, out=xc)] + integer.steps(xc, scale, y2, lo, hi)

        def gemm(xin: np.ndarray) -> Step:
            if integer is None:
                return partial(np.matmul, xin, waug, out=y2)
            return partial(integer.matmul, xin, y2)

        ready = env.fc_input.get(n.input1_id)
        if ready is not None and ready.shape == (x2.shape[0], ic + 1):  # the convert wrote the scaled input
            return [gemm(ready)] + clamp
        xa, ones = env.ones_column(x2.shape[0], ic)
        xd = xa[:, :ic]
        if c is None:
            steps = [ones, partial(np.copyto, xd, x2), partial(np.subtract, xd, zp, out=xd)]
            steps.append(partial(np.multiply, xd, scale, out=xd))
        else:
            steps = [ones, partial(np.multiply, c.reshape(x2.shape), scale, out=xd)]
        return steps + [gemm(xa)] + clamp

    return plan


def _quantized_convolution(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    """Static int8 convolution: the float planner on centred integers, then XNNPACK's requantization."""
    xq, wq, yq = g.quant.get(n.input1_id), g.quant.get(n.filter_id), g.quant.get(n.output_id)
    if xq is None or wq is None or (yq is None and xq.scale is not None):
        raise _Unsupported(
            "a quantized convolution needs a quantized input and weights, and a quantized output if static"
        )
    wid, xid, yid = g.shadow(n.filter_id), g.shadow(n.input1_id), g.shadow(n.output_id)
    channels = list(g.value(n.output_id).dims)[-1]
    wscale = _weight_scale(wq, channels)
    w = g.constant(n.filter_id, "filter").astype(np.float32) - np.float32(wq.zero_point)
    bias = g.constant(n.bias_id, "bias").reshape(-1).astype(np.float32) if n.bias_id != xs.INVALID_VALUE_ID else None
    dynamic = xq.scale is None
    # Static: centred integers and the int32 bias, inside the float planner (an im2col convolution adds
    # the bias in its sgemm). Dynamic: weights dequantized once; the bias comes after the input scale.
    # Output channels: dim 0 of a convolution's [OC, KH, KW, IC] filter, the last of a depthwise [1, KH, KW, OC].
    per_out = wscale.reshape(-1, 1, 1, 1) if isinstance(n, xs.XNNConv2d) else wscale
    g.constants[wid] = w * per_out if dynamic else w
    bid = xs.INVALID_VALUE_ID
    fused_bias = bias is not None and not dynamic and qfast.available()  # added in the compiled requantize
    if bias is not None and not dynamic and not fused_bias:
        bid = g.shadow(n.bias_id)
        g.constants[bid] = bias
    if not dynamic:
        g.exact.add(wid)
    inner = _COMPILERS[type(n)](
        dataclasses.replace(n, input1_id=xid, filter_id=wid, output_id=yid, bias_id=bid), node, g
    )
    del g.constants[wid]  # the float planner keeps its own packed copy
    if dynamic:  # dynamic int8 input, float output: one input scale per batch entry

        def plan(env: _Env) -> list:
            x = env[n.input1_id]
            scale, zp = env.dynamic[n.input1_id]
            rows = (scale.shape[0],) + (1,) * (x.ndim - 1)
            c = env.centred.get(n.input1_id)
            if c is None:
                xc = env.empty(xid, x.shape)
                steps = [partial(np.subtract, x, zp.reshape(rows), out=xc)]
            else:
                env.arrays[xid], steps = c, []
            steps += inner(env)
            acc = env[yid]
            env.alias(n.output_id, yid, acc)
            steps.append(partial(np.multiply, acc, scale.reshape(rows), out=acc))
            if bias is not None:
                steps.append(partial(np.add, acc, bias, out=acc))
            lo, hi = _min_max(node)
            return steps + ([] if (lo, hi) == (-math.inf, math.inf) else _clamp(acc, acc, lo, hi))

        return plan
    factor = (np.float32(xq.scale) * wscale / np.float32(yq.scale)).astype(np.float32)

    def plan(env: _Env) -> list:
        _, steps = _centred_input(env, n.input1_id, xq, xid)
        steps += inner(env)
        acc = env[yid]
        y = env.empty(n.output_id, acc.shape)
        return steps + _requantize_steps(acc, bias if fused_bias else None, factor, y, yq, node, (env, n.output_id))

    return plan


def _dequantized(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    """Any other node: its float kernel on dequantized inputs, its output requantized."""
    compiler = _COMPILERS.get(type(n))
    if compiler is None:
        raise _Unsupported("it has no kernel here")
    reads = [v for v in _reads(n) if v in g.quant]
    if any(g.quant[v].scale is None or np.ndim(g.quant[v].scale) for v in reads):
        raise _Unsupported("it reads a per-channel or dynamically quantized value, which only linear and conv take")
    swap = {v: g.shadow(v) for v in reads}
    out_q = g.quant.get(n.output_id)
    if out_q is not None:
        swap[n.output_id] = g.shadow(n.output_id)
    fields = {f: swap[getattr(n, f)] for f in ("output_id",) + _READ_FIELDS if getattr(n, f, None) in swap}
    for v in reads:
        if v in g.constants:
            g.constants[swap[v]] = (g.constants[v].astype(np.float32) - g.quant[v].zero_point) * g.quant[v].scale
    shadowed = dataclasses.replace(n, **fields)
    inner = _with_activation(shadowed, node, compiler(shadowed, node, g))  # the clamp acts on the float result

    fusable = type(n) is xs.XNNAdd and len(reads) == 2 and n.input1_id not in g.constants
    fusable = fusable and n.input2_id not in g.constants

    def plan(env: _Env) -> list:
        if fusable and qfast.available():
            fused = _fused_add(n, node, g, env)
            if fused is not None:
                return fused
        steps = []
        for v in dict.fromkeys(reads):
            if v not in g.constants:
                c = env.centred.get(v)
                f = env.empty(swap[v], env[v].shape if c is None else c.shape)
                if c is None:
                    steps += _dequantize_steps(env[v], f, g.quant[v])
                else:
                    steps.append(partial(np.multiply, c, g.quant[v].scale, out=f))
        steps += inner(env)
        if out_q is not None:
            f = env[swap[n.output_id]]
            q = env.empty(n.output_id, f.shape)
            steps += _quantize_steps(f, q, out_q.scale, out_q.zero_point, -math.inf, math.inf, (env, n.output_id))
        return steps

    return plan


def _quantized_node(n: Any, node: xs.XNode, g: _Graph) -> Planner:
    if isinstance(n, xs.XNNConvert):
        return _quantized_convert(n, node, g)
    if isinstance(n, xs.XNNFullyConnected):
        return _quantized_fully_connected(n, node, g)
    if isinstance(n, (xs.XNNConv2d, xs.XNNDepthwiseConv2d)) and n.filter_id in g.quant:
        return _quantized_convolution(n, node, g)
    if isinstance(n, xs.XNNClamp):
        qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)
        if qin is not None and qout is not None and _same_tensor_params(qin, qout):
            return _integer_clamp(n, node, g, qout)
    return _dequantized(n, node, g)


def _same_tensor_params(a: _QParams, b: _QParams) -> bool:
    return a.scale is not None and not np.ndim(a.scale) and a.scale == b.scale and a.zero_point == b.zero_point


def _reader_counts(reads: list) -> Counter:
    """Value id -> how many nodes read it (``reads``: each node's read value ids)."""
    return Counter(vid for r in reads for vid in set(r))


def _fuse_clamps(g: _Graph, xnodes: list, reads: list) -> None:
    """Record in ``g.narrow`` each quantized clamp that is the only reader of its input, between equal
    per-tensor parameters: the input's producer clips to the clamp's bounds when it rounds, and the
    clamp passes its input on (ExecuTorch's static int8 lowering keeps ReLU6 as a node of its own)."""
    readers = _reader_counts(reads)
    for node in xnodes:
        n = node.xnode_union
        if not isinstance(n, xs.XNNClamp) or readers.get(n.input_id) != 1 or n.input_id in g.needs_int8:
            continue
        qin, qout = g.quant.get(n.input_id), g.quant.get(n.output_id)
        if qin is not None and qout is not None and _same_tensor_params(qin, qout):
            lo, hi = _min_max(node)
            g.narrow[n.input_id] = _qbounds(g.dtype(n.output_id), qout.scale, qout.zero_point, lo, hi)


def _integer_clamp(n: Any, node: xs.XNode, g: _Graph, qp: _QParams) -> Planner:
    """A clamp (ReLU, ReLU6, hardtanh) between equal per-tensor parameters: a clip of the integers."""
    lo, hi = _min_max(node)

    def plan(env: _Env) -> list:
        c = env.centred.get(n.input_id)
        y = env.empty(n.output_id, (env[n.input_id] if c is None else c).shape)
        qmin, qmax = _qbounds(y.dtype, qp.scale, qp.zero_point, lo, hi)
        if c is None:
            return [partial(np.clip, env[n.input_id], y.dtype.type(qmin), y.dtype.type(qmax), out=y)]
        zp = qp.zero_point
        if n.input_id in env.narrowed:  # its producer already clipped to these bounds
            env.hand_over(n.input_id, n.output_id)
            return _quantize_steps(c, y, np.float32(1), zp, -math.inf, math.inf) if n.output_id in g.needs_int8 else []
        t = env.centred_buffer(n.output_id, c.shape)  # centred integers clipped stay integers: no rounding
        steps = [partial(np.clip, c, np.float32(qmin - zp), np.float32(qmax - zp), out=t)]
        if n.output_id in g.needs_int8:
            steps += _quantize_steps(t, y, np.float32(1), zp, -math.inf, math.inf)
        return steps

    return plan


# ------------------------------------------------------------------------ compile, run


def _compile_node(index: int, node: xs.XNode, g: _Graph) -> Planner:
    n = node.xnode_union
    kind = type(n).__name__ if n is not None else "an empty node"
    if n is not None and any(v in g.quant for v in _reads(n) + [getattr(n, "output_id", xs.INVALID_VALUE_ID)]):
        try:
            return _named_planner(index, kind, _quantized_node(n, node, g))
        except _Unsupported as e:
            raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    compiler = _COMPILERS.get(type(n))
    if compiler is None:
        raise DelegateLoadError(
            f"XNNPACK node {index} ({kind}) is not supported by edgetorch's XNNPACK runtime; "
            "run this program with ExecuTorch or lower the model without this operator in the partition"
        )
    lo, hi = _min_max(node)
    try:
        if type(n) in _APPLY_ACTIVATION:  # the layer clamps its own output, with its bias where it can
            return _named_planner(index, kind, compiler(n, node, g, (lo, hi)))  # type: ignore[call-arg]
        planner = compiler(n, node, g)
    except _Unsupported as e:
        raise DelegateLoadError(f"XNNPACK node {index} ({kind}) cannot run here: {e}") from None
    if isinstance(n, xs.XNNClamp) or (lo == -math.inf and hi == math.inf):
        return _named_planner(index, kind, planner)

    def with_activation(env: _Env) -> list:
        steps = planner(env)
        y = env[n.output_id]
        return steps + _clamp(y, y, lo, hi)

    return _named_planner(index, kind, with_activation)


_APPLY_ACTIVATION = (xs.XNNFullyConnected, xs.XNNConv2d, xs.XNNDepthwiseConv2d, *_BINARY)
# Float nodes that write a fresh output buffer, so that a clamp reading only them can clamp it in place.
_CLAMP_FUSABLE = (*_APPLY_ACTIVATION, xs.XNNConvTranspose2d, xs.XNNBatchMatrixMultiply)


def _fuse_float_clamps(g: _Graph, xnodes: list, reads: list) -> list:
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


def _with_activation(n: Any, node: xs.XNode, planner: Planner) -> Planner:
    lo, hi = _min_max(node)
    if isinstance(n, xs.XNNClamp) or (lo == -math.inf and hi == math.inf):
        return planner

    def plan(env: _Env) -> list:
        steps = planner(env)
        y = env[n.output_id]
        return steps + _clamp(y, y, lo, hi)

    return plan


def _named_planner(index: int, kind: str, planner: Planner) -> Planner:
    """Make plan-time failures name the node they come from."""

    def plan(env: _Env) -> list:
        try:
            return planner(env)
        except (ValueError, _Unsupported) as e:
            raise _PlanError(f"XNNPACK node {index} ({kind}): {e}") from None

    return plan


_READ_FIELDS = (
    "input_id", "input1_id", "input2_id", "input3_id", "input4_id", "input5_id", "filter_id", "bias_id",
    "query_id", "key_id", "value_id", "scale_id", "mask_id",
)  # fmt: skip


def _reads(n: Any) -> list[int]:
    """The value ids a node reads."""
    ids = (getattr(n, f, xs.INVALID_VALUE_ID) for f in _READ_FIELDS)
    return [i for i in ids if i != xs.INVALID_VALUE_ID]


class _PlanError(Exception):
    """Building a plan failed; the message names the node. Raised as a load or an input error by the caller."""


@dataclass
class _Plan:
    """The bound steps for one set of input shapes."""

    inputs: list  # arrays the external inputs are copied into
    steps: list
    outputs: list  # arrays holding the external outputs after the steps run
    ends: list = field(default_factory=list)  # per node: the index after its last step (for traced runs)


class XnnpackDelegate:
    """One initialised delegate: its graph, its compiled nodes and a plan per input-shape set."""

    def __init__(self, blob: XnnpackBlob, named_data: Mapping[str, memoryview]):
        self.graph = _Graph(blob, named_data)
        self.xnodes = list(blob.graph.xnodes)
        self.graph.needs_int8 = {vid for _, vid in self.graph.outputs} | {
            vid
            for node in blob.graph.xnodes
            if isinstance(node.xnode_union, xs.XNNConvert)
            for vid in _reads(node.xnode_union)
        }
        self.graph.fc_inputs = {
            node.xnode_union.input1_id
            for node in blob.graph.xnodes
            if isinstance(node.xnode_union, xs.XNNFullyConnected)
        }
        self.reads = [_reads(node.xnode_union) for node in blob.graph.xnodes]
        _fuse_clamps(self.graph, self.xnodes, self.reads)
        compiled = _fuse_float_clamps(self.graph, self.xnodes, self.reads)
        self.planners = [_compile_node(i, node, self.graph) for i, node in enumerate(compiled)]
        self.last_use = {vid: i for i, reads in enumerate(self.reads) for vid in reads}
        self.external = {vid for _, vid in self.graph.inputs + self.graph.outputs}
        self.plans: OrderedDict[tuple, _Plan] = OrderedDict()
        declared = tuple(tuple(self.graph.value(vid).dims) for _, vid in self.graph.inputs)
        try:
            with _RUN:
                self.plan(declared)
        except _PlanError as e:
            raise DelegateLoadError(str(e)) from None

    def plan(self, shapes: tuple) -> _Plan:
        """The steps for external inputs of ``shapes``, built on first use and cached."""
        plan = self.plans.get(shapes)
        if plan is not None:
            return plan
        env = _Env(self.graph, self.last_use, self.external)
        inputs = [env.empty(vid, shape) for (_, vid), shape in zip(self.graph.inputs, shapes)]
        steps, ends = [], []
        for index, (planner, reads) in enumerate(zip(self.planners, self.reads)):
            steps += planner(env)
            ends.append(len(steps))
            env.release(index, reads)
        plan = _Plan(inputs, steps, [env[vid] for _, vid in self.graph.outputs], ends)
        if any(compiled_kernels.splits(step) for step in steps):  # numba's threads run: BLAS's pool waits
            self.graph.own_threads = True
        self.plans[shapes] = plan
        if len(self.plans) > _MAX_PLANS:
            self.plans.popitem(last=False)
        return plan

    def execute(self, args: Sequence[Any]) -> list | None:
        """Run on ``args`` (inputs then outputs); returns the outputs only when their shapes changed."""
        if len(args) < self.graph.arg_count:
            raise InvalidInputError(
                f"the XNNPACK delegate takes {self.graph.arg_count} arguments (inputs then outputs), got {len(args)}"
            )
        ins = [args[ext] for ext, _ in self.graph.inputs]
        shapes = tuple(np.shape(a) for a in ins)
        with _RUN:
            try:
                plan = self.plan(shapes)
            except _PlanError as e:
                raise InvalidInputError(
                    f"the XNNPACK delegate cannot run inputs of shapes {list(shapes)}: {e}"
                ) from None
            for dst, src in zip(plan.inputs, ins):
                np.copyto(dst, src)
            with blas_threads.held(self.graph.own_threads):
                if etdump.tracing():
                    self._traced(plan)
                else:
                    for step in plan.steps:
                        step()
            return self._write_outputs(plan, args)

    def _traced(self, plan: _Plan) -> None:
        """Run the steps node by node, logging each node as a delegate event keyed by its debug handle
        (the identifier the delegate map of the ETRecord resolves), named after its node kind."""
        start = 0
        for node, end in zip(self.xnodes, plan.ends):
            t0 = etdump.clock_ns()
            for step in plan.steps[start:end]:
                step()
            kind = type(node.xnode_union).__name__
            etdump.event_tracer_log_profiling_delegate(kind, node.debug_handle, t0, etdump.clock_ns())
            start = end

    def _write_outputs(self, plan: _Plan, args: Sequence[Any]) -> list | None:
        results, resized = [], False
        for (ext, _), value in zip(self.graph.outputs, plan.outputs):
            dst = args[ext]
            if dst.shape != value.shape:
                resized = True
                dst = resize(dst, value.shape)
            np.copyto(dst, value)
            results.append(dst)
        return results if resized else None


class XnnpackBackend(BackendInterface):
    """ExecuTorch's XnnpackBackend, run with NumPy."""

    def init(
        self, processed: memoryview, compile_specs: Mapping[str, bytes], named_data: Mapping[str, memoryview]
    ) -> XnnpackDelegate:
        try:
            blob = parse_blob(processed)
        except BlobError as e:
            raise DelegateLoadError(f"cannot load the XNNPACK delegate: {e}") from None
        return XnnpackDelegate(blob, named_data)

    def execute(self, handle: XnnpackDelegate, args: Sequence[Any]) -> list | None:
        return handle.execute(args)


register_backend("XnnpackBackend", XnnpackBackend())
