"""ETDumpGen: the event tracer that records what a run did in ExecuTorch's ETDump format. Torch-free.

Attach one to a method (``program.load_method("forward", event_tracer=gen)``,
``Runtime.get().load_program(pte, enable_etdump=True)`` or
``Module(pte, enable_etdump=True)``), run, then write the ETDump with
``gen.write_etdump(path)`` or ``write_etdump_result_to_file(path, debug_buffer_path)``.

Per executed instruction it records, as ExecuTorch's runtime does, a profile
event named after the kernel (``native_call_<op>.<overload>``) plus the
instruction's ``OPERATOR_CALL`` (``DELEGATE_CALL`` for a delegate), keyed by
instruction id, so the Inspector maps them to Edge nodes through an ETRecord's
debug handle map. Each run is a ``RunData`` block named ``"Execute"`` with a
``Method::execute`` event; loading lands in the ``"Default"`` block. At debug
level ``kProgramOutputs`` the program outputs, at ``kIntermediateOutputs`` also
every kernel's outputs, are copied into the debug buffer (64-byte aligned, as
ExecuTorch lays it out) and referenced from debug events.

With ``track_allocations`` the load block also lists, per loaded method, an
allocator per planned memory id (and one for unplanned tensors) with an
allocation event per arena or tensor. A run fed by a bundled test case
(``set_bundled_input_index``) records the case's index in its block.

Delegates log their own events with :func:`event_tracer_log_profiling_delegate`
(or the start/end pair) while a traced run executes them.
"""

from __future__ import annotations

import enum
import os
import time
from typing import Any

import numpy as np

from edgetorch.errors import EdgetorchError
from edgetorch.format import etdump as fe
from edgetorch.format.program import ScalarType
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY

_SCALAR_OF = {dt: st for st, dt in reversed(list(SCALAR_TO_NUMPY.items()))}
_ALIGN = 64
_LOAD_CHAIN = -1  # the chain index ExecuTorch gives method-level events


class EventTracerDebugLogLevel(enum.IntEnum):
    """How much of each run's values to keep in the debug buffer (ExecuTorch's names)."""

    kNoLogging = 0
    kProgramOutputs = 1
    kIntermediateOutputs = 2


class DebugBufferFullError(EdgetorchError):
    """The debug buffer given to ETDumpGen has no room for a value the run produced."""


class ETDumpGen:
    """Collects profile and debug events of runs and serializes them as an ETDump (see the module docstring).

    ``debug_buffer_size`` > 0 sets the debug level to ``kIntermediateOutputs`` unless ``debug_level``
    says otherwise (as ExecuTorch's pybindings do); values beyond the buffer's size raise
    :class:`DebugBufferFullError`. ``track_allocations`` records the memory each loaded method takes as
    allocators and allocation events; it is off by default because ExecuTorch 1.5.1's Inspector refuses
    ETDumps with allocation events (edgetorch's Inspector lists them).
    """

    def __init__(
        self,
        debug_buffer_size: int = 0,
        debug_level: EventTracerDebugLogLevel | None = None,
        track_allocations: bool = False,
    ):
        self._blocks: list[fe.RunData] = [fe.RunData(name="Default")]
        self._buffer = bytearray()
        self._buffer_size = int(debug_buffer_size)
        if debug_level is None:
            debug_level = (
                EventTracerDebugLogLevel.kIntermediateOutputs
                if debug_buffer_size > 0
                else EventTracerDebugLogLevel.kNoLogging
            )
        self.debug_level = EventTracerDebugLogLevel(debug_level)
        self._outputs_of: dict[int, list[int]] = {}
        self._bundled_input_index = -1
        self.track_allocations = track_allocations

    # ------------------------------------------------------------- configuration (ExecuTorch's names)

    def set_debug_buffer(self, size: int) -> None:
        """Give the tracer a debug buffer of ``size`` bytes (values are logged only with a buffer)."""
        self._buffer_size = int(size)

    def set_event_tracer_debug_level(self, level: EventTracerDebugLogLevel) -> None:
        self.debug_level = EventTracerDebugLogLevel(level)

    def set_bundled_input_index(self, index: int) -> None:
        """Mark the runs that follow as fed by bundled test case ``index`` (-1: not bundled), as ExecuTorch's
        ``load_bundled_input`` does; each run's block records it."""
        self._bundled_input_index = int(index)

    def get_num_blocks(self) -> int:
        return len(self._blocks)

    # ------------------------------------------------------------- hooks the runtime calls

    def create_event_block(self, name: str) -> None:
        self._blocks.append(fe.RunData(name=name, bundled_input_index=self._bundled_input_index))

    def log_profile(
        self, name: str, start_ns: int, end_ns: int, chain: int = _LOAD_CHAIN, instruction: int = 0
    ) -> None:
        event = fe.ProfileEvent(name=name, chain_index=chain, instruction_id=instruction)
        event.start_time, event.end_time = int(start_ns), int(end_ns)
        self._blocks[-1].events.append(fe.Event(profile_event=event))

    def track_allocator(self, name: str) -> int:
        """Add an allocator to the current block; its id (1-based, as ExecuTorch numbers them) for
        :meth:`track_allocation`."""
        allocators = self._blocks[-1].allocators
        allocators.append(fe.Allocator(name=name))
        return len(allocators)

    def track_allocation(self, allocator_id: int, size: int) -> None:
        """``size`` bytes were allocated from allocator ``allocator_id`` of the current block."""
        event = fe.AllocationEvent(allocator_id=int(allocator_id), allocation_size=int(size))
        self._blocks[-1].events.append(fe.Event(allocation_event=event))

    def track_method_memory(self, method: str, arenas: list[Any], unplanned_bytes: list[int]) -> None:
        """Record a method's load-time memory (with ``track_allocations``): one allocator per planned memory
        id with its arena, and a ``method allocator`` for the unplanned tensors (inputs, delegate outputs)."""
        if not self.track_allocations:
            return
        for mem_id, arena in enumerate(arenas):
            if arena is not None:
                self.track_allocation(self.track_allocator(f"{method}: planned memory id {mem_id}"), arena.nbytes)
        if unplanned_bytes:
            allocator = self.track_allocator(f"{method}: method allocator")
            for size in unplanned_bytes:
                self.track_allocation(allocator, size)

    def begin_run(self, executor: Any) -> None:
        self.create_event_block("Execute")
        _ACTIVE[:] = [self]

    def end_run(self, executor: Any, start_ns: int, end_ns: int) -> None:
        _ACTIVE.clear()
        self.log_profile("Method::execute", start_ns, end_ns)
        if self._logs(EventTracerDebugLogLevel.kProgramOutputs):
            for value in executor.outputs(False):
                entry = self._value(value)
                if entry is not None:
                    entry.output = fe.Bool(bool_val=True)
                    debug = fe.DebugEvent(chain_index=fe.NO_CHAIN, instruction_id=0, debug_entry=entry)
                    self._blocks[-1].events.append(fe.Event(debug_event=debug))

    def instruction(self, executor: Any, pc: int, start_ns: int, end_ns: int) -> None:
        """Instruction ``pc`` ran from ``start_ns`` to ``end_ns`` (the same tick when its work was done at load):
        log its events, and at ``kIntermediateOutputs`` the values it wrote (every argument, for a delegate)."""
        kind, name = executor.event_name(pc)
        events = self._blocks[-1].events
        if kind in ("OPERATOR_CALL", "DELEGATE_CALL") and self._logs(EventTracerDebugLogLevel.kIntermediateOutputs):
            values = executor.instruction_outputs(pc) if kind == "OPERATOR_CALL" else executor.call_arguments(pc)
            for value in values:  # one debug event per value, as ExecuTorch logs them
                entry = self._value(value)
                if entry is not None:
                    debug = fe.DebugEvent(chain_index=0, instruction_id=pc, debug_entry=entry)
                    events.append(fe.Event(debug_event=debug))
        if kind == "OPERATOR_CALL":  # the kernel's own event, named as ExecuTorch's kernels name theirs
            self._profile(events, f"native_call_{name.rpartition('::')[2]}", pc, start_ns, end_ns)
        self._profile(events, kind, pc, start_ns, end_ns)

    def _logs(self, level: EventTracerDebugLogLevel) -> bool:
        return self.debug_level >= level and self._buffer_size > 0

    @staticmethod
    def _profile(events: list, name: str, pc: int, start_ns: int, end_ns: int) -> None:
        event = fe.ProfileEvent(name=name, chain_index=0, instruction_id=pc)
        event.start_time, event.end_time = int(start_ns), int(end_ns)
        events.append(fe.Event(profile_event=event))

    def log_profiling_delegate(
        self,
        name: str | None,
        delegate_debug_id: int | None,
        start_ns: int,
        end_ns: int,
        metadata: bytes | None = None,
    ) -> None:
        """An event inside a delegate: identified by ``name`` (a string id) or ``delegate_debug_id`` (an int)."""
        event = fe.ProfileEvent(
            name=name,
            chain_index=0,
            instruction_id=self.current,
            delegate_debug_id_int=-1 if delegate_debug_id is None else int(delegate_debug_id),
            delegate_debug_id_str=name if delegate_debug_id is None else None,
            delegate_debug_metadata=bytes(metadata) if metadata else None,
        )
        event.start_time, event.end_time = int(start_ns), int(end_ns)
        self._blocks[-1].events.append(fe.Event(profile_event=event))

    current = -1  # the instruction running now; the executor sets it

    # ------------------------------------------------------------- values

    def _value(self, value: Any) -> fe.Value | None:
        if isinstance(value, np.ndarray):
            return fe.Value(val=fe.ValueType.Tensor, tensor=self._tensor(value))
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
            tensors = fe.TensorList(tensors=[self._tensor(v) for v in value])
            return fe.Value(val=fe.ValueType.TensorList, tensor_list=tensors)
        if isinstance(value, (bool, np.bool_)):
            return fe.Value(val=fe.ValueType.Bool, bool_value=fe.Bool(bool_val=bool(value)))
        if isinstance(value, (int, np.integer)):
            return fe.Value(val=fe.ValueType.Int, int_value=fe.Int(int_val=int(value)))
        if isinstance(value, (float, np.floating)):
            return fe.Value(val=fe.ValueType.Double, double_value=fe.Double(double_val=float(value)))
        return None

    def _tensor(self, array: np.ndarray) -> fe.Tensor:
        data = np.asarray(array, order="C")  # ascontiguousarray would make a 0-d value 1-d
        strides = [s // data.itemsize for s in data.strides] if data.itemsize else [0] * data.ndim
        scalar = _SCALAR_OF.get(data.dtype, ScalarType.BYTE)
        if data.nbytes == 0:  # no bytes to keep; ExecuTorch marks it with offset -1
            return fe.Tensor(scalar_type=scalar, sizes=list(data.shape), strides=strides, offset=-1)
        offset = -len(self._buffer) % _ALIGN + len(self._buffer)
        end = offset + data.nbytes
        if end > self._buffer_size:
            raise DebugBufferFullError(
                f"the debug buffer holds {self._buffer_size} bytes, but this run's values need at least {end}; "
                "pass a larger debug_buffer_size (or log program outputs only)"
            )
        self._buffer.extend(bytes(offset - len(self._buffer)))
        self._buffer.extend(data.tobytes())
        return fe.Tensor(scalar_type=scalar, sizes=list(data.shape), strides=strides, offset=offset)

    # ------------------------------------------------------------- results

    def get_etdump_data(self) -> bytes:
        """The ETDump bytes (a size-prefixed flatbuffer); empty when nothing was recorded."""
        if not any(block.events for block in self._blocks):
            return b""
        return fe.serialize_etdump(fe.ETDump(version=0, run_data=list(self._blocks)))

    def get_debug_buffer(self) -> bytes:
        return bytes(self._buffer)

    def write_etdump(self, path: str | os.PathLike, debug_buffer_path: str | os.PathLike | None = None) -> None:
        """Write the ETDump to ``path`` and, if given, the debug buffer to ``debug_buffer_path``."""
        with open(path, "wb") as f:
            f.write(self.get_etdump_data())
        if debug_buffer_path is not None:
            with open(debug_buffer_path, "wb") as f:
                f.write(self.get_debug_buffer())

    write_etdump_result_to_file = write_etdump


# The tracer of the run under way, if any: where delegates log their events.
_ACTIVE: list[ETDumpGen] = []


def tracing() -> bool:
    """Whether a run traced into an ETDump is under way (delegates log their own events only then)."""
    return bool(_ACTIVE)


def clock_ns() -> int:
    """The tick ETDump events are stamped with: a monotonic clock in nanoseconds."""
    return time.perf_counter_ns()


def event_tracer_log_profiling_delegate(
    name: str | None, delegate_debug_id: int | None, start_ns: int, end_ns: int, metadata: bytes | None = None
) -> None:
    """Log an event that happened inside a delegate, with its timestamps (a no-op when no run is traced)."""
    if _ACTIVE:
        _ACTIVE[-1].log_profiling_delegate(name, delegate_debug_id, start_ns, end_ns, metadata)


def event_tracer_start_profiling_delegate(name: str | None, delegate_debug_id: int | None) -> tuple:
    """Start timing a delegate event; pass the result to :func:`event_tracer_end_profiling_delegate`."""
    return (name, delegate_debug_id, clock_ns())


def event_tracer_end_profiling_delegate(entry: tuple, metadata: bytes | None = None) -> None:
    name, delegate_debug_id, start = entry
    event_tracer_log_profiling_delegate(name, delegate_debug_id, start, clock_ns(), metadata)
