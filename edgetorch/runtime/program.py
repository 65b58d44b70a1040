"""Runtime, Program, Method, MethodMeta and Module: the executorch.runtime API over NumPy. Torch-free."""

from __future__ import annotations

import enum
import mmap
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import numpy as np

from edgetorch.errors import InvalidInputError, ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.format.flatbuffer import FlatbufferError
from edgetorch.format.ptd import load_ptd
from edgetorch.format.pte import FormatError, PteFile, load_pte
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY
from edgetorch.runtime.executor import MethodExecutor, op_key
from edgetorch.runtime.memory import DEFAULT_MAX_PLANNED_BYTES
from edgetorch.runtime.verification import check_internal_consistency


class Verification(enum.Enum):
    """How much of a program to check at load; both levels bounds-check everything they read.

    ``Minimal`` checks the header and decodes the program; each method checks what it binds when it is loaded.
    ``InternalConsistency`` also checks every internal reference of every method at ``load_program``
    (see :mod:`edgetorch.runtime.verification`).
    """

    Minimal = 0
    InternalConsistency = 1


@dataclass
class TensorInfo:
    """A method input's or output's planned tensor: dtype, sizes (upper bounds when dynamic), dim order."""

    sizes: tuple[int, ...]
    dtype: np.dtype
    dim_order: tuple[int, ...]
    dynamic: bool = False

    @property
    def nbytes(self) -> int:
        n = self.dtype.itemsize
        for s in self.sizes:
            n *= s
        return n

    def __repr__(self) -> str:
        bound = " (upper bound)" if self.dynamic else ""
        return f"TensorInfo(sizes={list(self.sizes)}{bound}, dtype={self.dtype}, dim_order={list(self.dim_order)})"


@dataclass
class MethodMeta:
    """What a caller needs to know about a method before running it."""

    name: str
    inputs: list[TensorInfo | str] = field(default_factory=list)
    outputs: list[TensorInfo | str] = field(default_factory=list)
    planned_buffer_sizes: list[int] = field(default_factory=list)
    num_instructions: int = 0

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    def input_tensor_meta(self, i: int) -> TensorInfo | str:
        return self.inputs[i]

    def output_tensor_meta(self, i: int) -> TensorInfo | str:
        return self.outputs[i]

    @property
    def num_memory_planned_buffers(self) -> int:
        return len(self.planned_buffer_sizes)

    def memory_planned_buffer_size(self, i: int) -> int:
        return self.planned_buffer_sizes[i]


def _value_info(ev: fbp.EValue) -> TensorInfo | str:
    v = ev.val
    if isinstance(v, fbp.Tensor):
        dtype = SCALAR_TO_NUMPY.get(v.scalar_type, np.dtype(np.uint8))
        order = tuple(v.dim_order) if len(v.dim_order) else tuple(range(len(v.sizes)))
        return TensorInfo(tuple(v.sizes), dtype, order, v.shape_dynamism != fbp.TensorShapeDynamism.STATIC)
    return type(v).__name__ if v is not None else "None"


class EventTracer:
    """Records each instruction's wall time; attach with ``Method.set_event_tracer``."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float]] = []

    def record(self, instruction: int, seconds: float) -> None:
        self.events.append((instruction, seconds))

    def clear(self) -> None:
        self.events.clear()


class Method:
    """A loaded method: planned memory allocated, kernels bound, delegates initialised."""

    def __init__(self, executor: MethodExecutor, meta: MethodMeta):
        self._executor = executor
        self.metadata = meta

    @property
    def name(self) -> str:
        return self.metadata.name

    def execute(self, inputs: Sequence[Any] = ()) -> list[Any]:
        """Run the method on ``inputs`` (arrays, scalars, or anything with ``__array__``).

        Returns the outputs as NumPy arrays (copies) or Python scalars.
        """
        ex = self._executor
        ex.set_inputs(list(inputs))
        ex.run()
        return ex.outputs()

    __call__ = execute

    def set_event_tracer(self, tracer: EventTracer | None) -> None:
        """Record each instruction's time in ``tracer`` on every run; None detaches it."""
        self._executor.tracer = tracer

    @property
    def operators(self) -> list[str]:
        return list(self._executor.operators)

    @property
    def instructions(self) -> list[Any]:
        return list(self._executor.instructions)

    def __repr__(self) -> str:
        return f"Method({self.name!r}, inputs={self.metadata.num_inputs}, outputs={self.metadata.num_outputs})"


class Program:
    """A loaded program: the decoded schema plus the bytes its constants and segments live in."""

    def __init__(self, pte: PteFile, keepalive: Any, runtime: Runtime, verification: Verification):
        self._pte = pte
        self._keepalive = keepalive
        self._runtime = runtime
        self._verification = verification
        self.program = pte.program
        self._plans = {plan.name: plan for plan in pte.program.execution_plan}
        self._named: dict[str, memoryview] | None = None
        self._external: dict[str, memoryview] = {}
        self._data_keepalive: list[Any] = []

    @property
    def method_names(self) -> list[str]:
        return list(self._plans)

    @property
    def num_methods(self) -> int:
        return len(self._plans)

    def _plan(self, name: str) -> fbp.ExecutionPlan:
        plan = self._plans.get(name)
        if plan is None:
            raise InvalidInputError(f"the program has no method {name!r}; its methods are {self.method_names}")
        return plan

    def metadata(self, name: str) -> MethodMeta:
        plan = self._plan(name)
        values = plan.values

        def info(i: int) -> TensorInfo | str:
            if not 0 <= i < len(values):
                raise ProgramLoadError(f"method {name!r} refers to value {i} of {len(values)}")
            return _value_info(values[i])

        sizes = [int(s) for s in plan.non_const_buffer_sizes[1:]]
        ninstr = sum(len(c.instructions) for c in plan.chains)
        return MethodMeta(name, [info(i) for i in plan.inputs], [info(i) for i in plan.outputs], sizes, ninstr)

    def load_method(self, name: str = "forward") -> Method:
        """Allocate planned memory, bind kernels and initialise delegates for method ``name``."""
        plan = self._plan(name)
        try:
            executor = MethodExecutor(plan, self, self._runtime.max_planned_bytes)
        except (FormatError, FlatbufferError) as e:
            raise ProgramLoadError(str(e)) from None
        return Method(executor, self.metadata(name))

    def operators(self, name: str | None = None) -> list[str]:
        """Operator names (``namespace::op.overload``) used by one method, or by all."""
        plans = [self._plan(name)] if name else list(self._plans.values())
        return [op_key(op) for plan in plans for op in plan.operators]

    # ----------------------------------------------------------- data access for executors

    def constant_data(self, index: int, what: str) -> tuple[memoryview, int]:
        prog = self.program
        if prog.constant_buffer:
            if index >= len(prog.constant_buffer):
                raise ProgramLoadError(f"{what} uses constant buffer {index} of {len(prog.constant_buffer)}")
            return prog.constant_buffer[index].storage, 0
        cs = prog.constant_segment
        if cs is None or index >= len(cs.offsets):
            found = 0 if cs is None else len(cs.offsets)
            raise ProgramLoadError(f"{what} uses constant {index}, but the program has {found} constant offsets")
        return self._segment(cs.segment_index), int(cs.offsets[index])

    def mutable_data(self, seg_index: int, index: int, what: str) -> tuple[memoryview, int]:
        segs = self.program.mutable_data_segments or []
        if seg_index >= len(segs) or index >= len(segs[seg_index].offsets):
            raise ProgramLoadError(
                f"{what} has initial state {index} in mutable segment {seg_index}, which does not exist"
            )
        sub = segs[seg_index]
        return self._segment(sub.segment_index), int(sub.offsets[index])

    def delegate_data(self, ref: fbp.BackendDelegateDataReference | None, what: str) -> memoryview:
        if ref is None:
            raise ProgramLoadError(f"{what} has no processed data")
        if ref.location == fbp.DataLocation.INLINE:
            inline = self.program.backend_delegate_data
            if ref.index >= len(inline):
                raise ProgramLoadError(f"{what} uses inline data {ref.index} of {len(inline)}")
            return inline[ref.index].data
        return self._segment(ref.index)

    @property
    def named_data(self) -> dict[str, memoryview]:
        if self._named is None:
            self._named = {nd.key: self._segment(nd.segment_index) for nd in (self.program.named_data or [])}
            self._named.update(self._external)
        return self._named

    def external_tensor(self, key: str | None, what: str) -> memoryview:
        data = self.named_data.get(key or "")
        if data is None:
            raise ProgramLoadError(
                f"{what} keeps its data outside the program under key {key!r}; load the .ptd file that holds it"
            )
        return data

    def add_data_map(self, entries: dict[str, memoryview]) -> None:
        """Make external tensors (for example from a .ptd file) available to methods loaded afterwards."""
        self._external.update(entries)
        self._named = None

    def _segment(self, index: int) -> memoryview:
        try:
            return self._pte.segment(index)
        except FormatError as e:
            raise ProgramLoadError(str(e)) from None


class Runtime:
    """Entry point, as in ``executorch.runtime``: ``Runtime.get().load_program(path_or_bytes)``."""

    _instance: Runtime | None = None

    def __init__(self, max_planned_bytes: int = DEFAULT_MAX_PLANNED_BYTES):
        self.max_planned_bytes = max_planned_bytes

    @classmethod
    def get(cls) -> Runtime:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def load_program(
        self,
        data: str | os.PathLike | bytes | bytearray | memoryview | BinaryIO,
        verification: Verification = Verification.Minimal,
        data_files: Sequence[str | os.PathLike | bytes] = (),
    ) -> Program:
        """Load a .pte from a path, bytes, or a binary file object; files are memory-mapped, not copied.

        ``data_files`` are ``.ptd`` files holding tensors the program keeps outside itself.
        """
        keepalive, buf = _open(data)
        try:
            pte = load_pte(buf)
        except (FormatError, FlatbufferError) as e:
            raise ProgramLoadError(str(e)) from None
        if verification is Verification.InternalConsistency:
            check_internal_consistency(pte)
        program = Program(pte, keepalive, self, verification)
        for extra in data_files:
            holder, raw = _open(extra)
            try:
                entries = load_ptd(raw).named_data()
            except (FormatError, FlatbufferError) as e:
                raise ProgramLoadError(
                    f"data file {extra if isinstance(extra, (str, os.PathLike)) else '<bytes>'}: {e}"
                ) from None
            program.add_data_map(entries)
            program._data_keepalive.append(holder)
        return program

    @property
    def backend_registry(self) -> list[str]:
        from edgetorch.runtime.backends import registered_backends

        return registered_backends()

    @property
    def operator_registry(self) -> list[str]:
        from edgetorch.runtime.kernels.registry import KERNELS

        return sorted(KERNELS)


def _open(data: Any) -> tuple[Any, Any]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return data, data
    if isinstance(data, (str, os.PathLike)):
        try:
            with open(data, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise ProgramLoadError(f"{os.fspath(data)!r} is empty; expected a .pte program")
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise ProgramLoadError(f"cannot read program file {os.fspath(data)!r}: {e.strerror}") from None
        return mapped, mapped
    if hasattr(data, "read"):
        raw = data.read()
        if not isinstance(raw, (bytes, bytearray)):
            raise ProgramLoadError("the file object must be opened in binary mode ('rb')")
        return raw, raw
    raise ProgramLoadError(f"load_program takes a path, bytes or a binary file object, got {type(data).__name__}")


class Module:
    """ExecuTorch's Module extension: a program with its methods loaded on first use."""

    def __init__(self, source: str | os.PathLike | bytes, verification: Verification = Verification.Minimal):
        self._source = source
        self._verification = verification
        self._program: Program | None = None
        self._methods: dict[str, Method] = {}

    @property
    def program(self) -> Program:
        if self._program is None:
            self._program = Runtime.get().load_program(self._source, self._verification)
        return self._program

    @property
    def method_names(self) -> list[str]:
        return self.program.method_names

    def load_method(self, name: str) -> Method:
        if name not in self._methods:
            self._methods[name] = self.program.load_method(name)
        return self._methods[name]

    def method_meta(self, name: str) -> MethodMeta:
        return self.program.metadata(name)

    def execute(self, name: str, inputs: Iterable[Any] = ()) -> list[Any]:
        return self.load_method(name).execute(list(inputs))

    def forward(self, *inputs: Any) -> list[Any]:
        return self.execute("forward", inputs)

    def __call__(self, *inputs: Any) -> list[Any]:
        return self.forward(*inputs)
