"""Where the XNNPACK runtime's schedules take their memory.

One process-wide scratch arena (``SCRATCH``) that every schedule of every delegate lays its buffers out
over from the start, and the value table of a schedule being built (``Env``), which returns a buffer to a
pool once its last reader is planned and lets reshapes and copies alias their input. Also the planner contract:
a ``Planner`` takes the ``Env`` and returns bound ``Step`` callables.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from edgetorch.backends.xnnpack.runtime.values import Graph, Unsupported

Step = Callable[[], Any]
Planner = Callable[["Env"], list]  # compiled from a node at load; returns its steps for the arrays of one schedule

_CHUNK = 4 << 20  # bytes a scratch chunk holds at least
_FLOAT32 = np.dtype(np.float32)


SCRATCH: list[np.ndarray] = []
"""The memory every delegate's schedules take their buffers from (all but persistent ones), in chunks.

A delegate's intermediates, and the copies of its inputs and outputs, are only live while one of its schedules runs:
the inputs are copied in at the start of ``execute`` and the outputs copied out at its end. So every schedule
of every delegate lays its buffers out from the start of the same chunks (``_Cursor``), and a process holds the
largest schedule's bytes, not their sum (an LLM lowers to some 150 delegates with two schedules each).
Calls run one at a time (``RUN``), which is what makes the sharing safe."""


def _aligned_chunk(size: int) -> np.ndarray:
    """``size`` bytes whose first byte is 64-byte aligned (NumPy only promises 16), so that the 64-byte slots
    laid out from it start on cache lines (and on a 16-lane vector's width)."""
    raw = np.empty(size + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start : start + size]


class _Cursor:
    """One schedule's bump allocation over ``SCRATCH``, from the first chunk's start."""

    def __init__(self) -> None:
        self.index = self.offset = 0

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        size = math.prod(shape) * dtype.itemsize
        slot = -(-max(size, 1) // 64) * 64  # 64-byte aligned slots
        while True:
            if self.index == len(SCRATCH):
                SCRATCH.append(_aligned_chunk(max(_CHUNK, slot)))
            chunk, start = SCRATCH[self.index], self.offset
            if start + slot <= chunk.nbytes:
                self.offset = start + slot
                return np.ndarray(shape, dtype, chunk, start)
            self.index, self.offset = self.index + 1, 0


RUN = threading.Lock()  # one delegate call (or schedule build) at a time: they share SCRATCH


class Env:
    """Value id -> array while a schedule is built: constants, external inputs and every intermediate.

    Intermediates share memory: once the last node reading a buffer (directly or through a reshape or
    copy alias) is planned, the buffer goes back to a pool that later outputs of the same byte size
    draw from. Steps run in node order, so a reused buffer is written only after its last reader ran.
    External inputs and outputs and persistent buffers (a pad's border is written once) are never pooled.

    This is an allocator over the delegate's graph, not an analysis of a memory plan: it makes the plan (per input
    shapes, while a schedule is built) where ``runtime/plan_analysis.py`` answers questions about the plan a
    program carries. Both need each value's last reader (``plan_analysis.last_reads``, given to ``last_use``).
    An alias here is copy elision's question answered by construction: copy elision (static and dynamic
    methods) may turn a copy into a view only if nothing writes the source's planned bytes before the view's
    last reader (``PlanFacts.written_over``); here the source's memory stays out of the pool until then.
    """

    def __init__(self, graph: Graph, last_use: Mapping[int, int], pinned: set[int]):
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
        self.working: list[np.ndarray] = []  # the node's own buffers (``scratch``), pooled when it is released
        self.cursor = _Cursor()

    def __getitem__(self, vid: int) -> np.ndarray:
        a = self.arrays.get(vid)
        if a is None:
            raise Unsupported(f"it reads value {vid} before any node produces it")
        return a

    def _take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A C-contiguous array from the pool if one of its byte size is free, else from the scratch."""
        pool = self.free.get(math.prod(shape) * dtype.itemsize)
        return np.ndarray(shape, dtype, pool.pop()) if pool else self.cursor.take(shape, dtype)

    def empty(self, vid: int, shape: Sequence[int], persistent: bool = False) -> np.ndarray:
        """A fresh or recycled C-contiguous array for value ``vid``; ``persistent`` keeps it out of the pool."""
        shape, dtype = shape if type(shape) is tuple else tuple(map(int, shape)), self.graph.dtype(vid)
        if persistent:
            a = np.empty(shape, dtype)
            self.pinned.add(vid)
        else:
            a = self._take(shape, dtype)
        self.arrays[vid], self.root[vid], self.end[vid] = a, vid, self.last_use.get(vid, -1)
        return a

    def centred_buffer(self, vid: int, shape: Sequence[int]) -> np.ndarray:
        """A float32 buffer for value ``vid``'s centred integers, recorded as ``centred[vid]``; it goes back to
        the pool with ``vid``'s own memory (so quantized graphs reuse memory as float ones do)."""
        a = self.centred[vid] = self._take(tuple(map(int, shape)), _FLOAT32)
        self.extra.setdefault(vid, []).append(a)
        return a

    def scratch(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A working buffer only the steps of the node being planned use: back in the pool once it is released."""
        a = self._take(shape, dtype)
        self.working.append(a)
        return a

    def ones_column(self, rows: int, k: int) -> tuple[np.ndarray, Step]:
        """A [rows, k + 1] float32 buffer and the step that sets its last column to 1 (the bias row's
        multiplier), run at every call since the memory is shared."""
        buf = self.cursor.take((rows, k + 1), _FLOAT32)
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
        """After node ``index`` is planned, pool its working buffers and the buffers nothing after it reads
        (``reads``: the values it reads, or only those it is the last to read, which is enough)."""
        done, self.working = self.working, []
        for v in reads:
            root = self.root.get(v)
            end = self.end.get(root) if root is not None else None  # None too once pooled (a value read twice)
            if end is not None and end <= index and root not in self.pinned:
                del self.end[root]
                done.append(self.arrays[root])
                done += self.extra.pop(root, ())
        for a in done:
            self.free.setdefault(a.nbytes, []).append(np.ndarray(a.nbytes, np.uint8, a))
