"""Runtime, Program, Method, MethodMeta and Module: the executorch.runtime API over NumPy. Torch-free."""

from __future__ import annotations

import enum
import mmap
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from typing import Any, BinaryIO

import ml_dtypes
import numpy as np

from edgetorch.errors import Error, InvalidInputError, MethodNotFoundError, NoSuchEntryError, ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.format.flatbuffer import FlatbufferError
from edgetorch.format.program import ScalarType
from edgetorch.format.ptd import load_ptd
from edgetorch.format.pte import FormatError, PteFile, load_pte
from edgetorch.runtime import tuning, warm
from edgetorch.runtime.backends import BackendRegistry
from edgetorch.runtime.bundled import bundled_expected_outputs, bundled_inputs, get_program_data, verify_outputs
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY
from edgetorch.runtime.etdump import ETDumpGen, clock_ns
from edgetorch.runtime.executor import MethodExecutor
from edgetorch.runtime.generator import use_generator
from edgetorch.runtime.memory import DEFAULT_MAX_PLANNED_BYTES
from edgetorch.runtime.plan_analysis import op_key
from edgetorch.runtime.verification import check_internal_consistency


class Verification(enum.Enum):
    """How much of a program to check at load; both levels bounds-check everything they read.

    ``Minimal`` checks the header and decodes the program; each method checks what it binds when it is loaded.
    ``InternalConsistency`` also checks every internal reference of every method at ``load_program``
    (see :mod:`edgetorch.runtime.verification`).
    """

    Minimal = 0
    InternalConsistency = 1


class _Int(int):
    """An int that can also be called: ``meta.num_inputs`` and ExecuTorch's ``meta.num_inputs()`` both work."""

    def __call__(self) -> int:
        return int(self)


class _Str(str):
    """A str that can also be called: ``meta.name`` and ExecuTorch's ``meta.name()`` both work."""

    def __call__(self) -> str:
        return str(self)


class _Sizes(tuple):
    """A shape tuple that can also be called: ``info.sizes`` and ExecuTorch's ``info.sizes()`` both work."""

    def __call__(self) -> tuple[int, ...]:
        return tuple(self)


class TensorInfo:
    """A method input's or output's planned tensor, as ExecuTorch's ``TensorInfo`` describes it.

    ExecuTorch's methods ``sizes()``, ``dtype()`` (the ScalarType code), ``nbytes()`` and
    ``is_memory_planned()`` work, and so do the attributes ``sizes``, ``nbytes``, ``numpy_dtype``,
    ``dim_order`` and ``dynamic`` (sizes are upper bounds when dynamic).
    """

    def __init__(
        self,
        sizes: Sequence[int],
        scalar_type: ScalarType,
        dim_order: Sequence[int],
        dynamic: bool = False,
        memory_planned: bool = True,
    ):
        self.sizes = _Sizes(int(s) for s in sizes)
        self.scalar_type = scalar_type
        self.numpy_dtype: np.dtype = SCALAR_TO_NUMPY.get(scalar_type, np.dtype(np.uint8))
        self.dim_order = tuple(int(d) for d in dim_order)
        self.dynamic = dynamic
        self._memory_planned = memory_planned

    def dtype(self) -> ScalarType:
        """The element type as ExecuTorch's ScalarType (an int: 6 is Float); ``numpy_dtype`` is the NumPy one."""
        return self.scalar_type

    @property
    def nbytes(self) -> _Int:
        n = self.numpy_dtype.itemsize
        for s in self.sizes:
            n *= s
        return _Int(n)

    def is_memory_planned(self) -> bool:
        """Whether the program plans this tensor's memory (else the caller provides it at run time)."""
        return self._memory_planned

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorInfo) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        return (self.sizes, self.scalar_type, self.dim_order, self.dynamic, self._memory_planned)

    def __repr__(self) -> str:
        # ExecuTorch's text for it, word for word (its dtype by c10's name): ``str(meta)`` compares equal.
        name = _C10_NAMES.get(self.scalar_type, str(self.scalar_type))
        return (
            f"TensorInfo(sizes={list(self.sizes)}, dtype={name}, is_memory_planned={self._memory_planned}, "
            f"nbytes={self.nbytes})"
        )


# ScalarType codes by the names c10 prints them with (``Float``, ``QUInt4x2``), as ExecuTorch's reprs do.
_C10_NAMES = {
    ScalarType.BYTE: "Byte",
    ScalarType.CHAR: "Char",
    ScalarType.SHORT: "Short",
    ScalarType.INT: "Int",
    ScalarType.LONG: "Long",
    ScalarType.HALF: "Half",
    ScalarType.FLOAT: "Float",
    ScalarType.DOUBLE: "Double",
    ScalarType.COMPLEX32: "ComplexHalf",
    ScalarType.COMPLEX64: "ComplexFloat",
    ScalarType.COMPLEX128: "ComplexDouble",
    ScalarType.BOOL: "Bool",
    ScalarType.QINT8: "QInt8",
    ScalarType.QUINT8: "QUInt8",
    ScalarType.QINT32: "QInt32",
    ScalarType.BFLOAT16: "BFloat16",
    ScalarType.QUINT4X2: "QUInt4x2",
    ScalarType.QUINT2X4: "QUInt2x4",
    ScalarType.BITS16: "Bits16",
    ScalarType.FLOAT8E5M2: "Float8_e5m2",
    ScalarType.FLOAT8E4M3FN: "Float8_e4m3fn",
    ScalarType.FLOAT8E5M2FNUZ: "Float8_e5m2fnuz",
    ScalarType.FLOAT8E4M3FNUZ: "Float8_e4m3fnuz",
    ScalarType.UINT16: "UInt16",
    ScalarType.UINT32: "UInt32",
    ScalarType.UINT64: "UInt64",
}


class MethodMeta:
    """What a caller needs to know about a method before running it, as ExecuTorch's ``MethodMeta`` says it.

    ExecuTorch's methods ``name()``, ``num_inputs()``, ``num_outputs()``, ``num_attributes()``,
    ``input_tensor_meta(i)``, ``output_tensor_meta(i)`` and ``attribute_tensor_meta(i)`` work; so do the
    attributes ``name``, ``num_inputs``, ``num_outputs`` and ``num_attributes``. A non-tensor input or output is
    described by its kind (``"Int"``, ``"Double"``, ...). The method's *attributes* are its named tensors
    (those the program gives a fully qualified name, such as the mutable buffers of a program exported with
    ``emit_mutable_buffer_names=True``); ``Method.get_attribute(name)`` reads one.
    """

    def __init__(
        self,
        name: str,
        inputs: Sequence[TensorInfo | str] = (),
        outputs: Sequence[TensorInfo | str] = (),
        planned_buffer_sizes: Sequence[int] = (),
        num_instructions: int = 0,
        attributes: Sequence[TensorInfo | str] = (),
        attribute_values: dict[str, int] | None = None,
    ):
        self.name = _Str(name)
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attributes = list(attributes)
        self.attribute_values = dict(attribute_values or {})
        """Each attribute's value index in the method's plan, by fully qualified name."""
        self.planned_buffer_sizes = [int(s) for s in planned_buffer_sizes]
        self.num_instructions = num_instructions

    @property
    def num_inputs(self) -> _Int:
        return _Int(len(self.inputs))

    @property
    def num_outputs(self) -> _Int:
        return _Int(len(self.outputs))

    def input_tensor_meta(self, index: int) -> TensorInfo | str:
        return _nth(self.inputs, index, "input", self.name)

    def output_tensor_meta(self, index: int) -> TensorInfo | str:
        return _nth(self.outputs, index, "output", self.name)

    @property
    def num_attributes(self) -> _Int:
        return _Int(len(self.attributes))

    def attribute_tensor_meta(self, index: int) -> TensorInfo | str:
        return _nth(self.attributes, index, "attribute", self.name)

    @property
    def num_memory_planned_buffers(self) -> _Int:
        return _Int(len(self.planned_buffer_sizes))

    def memory_planned_buffer_size(self, index: int) -> int:
        return _nth(self.planned_buffer_sizes, index, "planned buffer", self.name)

    def __repr__(self) -> str:
        # ExecuTorch's text: each tensor's description as a quoted string in the lists.
        ins, outs = [str(v) for v in self.inputs], [str(v) for v in self.outputs]
        return (
            f"MethodMeta(name={str(self.name)!r}, num_inputs={len(self.inputs)}, input_tensor_meta={ins}, "
            f"num_outputs={len(self.outputs)}, output_tensor_meta={outs})"
        )


def _nth(items: Sequence[Any], index: int, what: str, method: str) -> Any:
    if not isinstance(index, int) or not 0 <= index < len(items):
        raise NoSuchEntryError(f"method {str(method)!r} has {len(items)} {what}s; index {index!r} is out of range")
    return items[index]


def attribute_indices(plan: fbp.ExecutionPlan) -> dict[str, int]:
    """A method's named tensors (its *attributes*, as ExecuTorch calls them): fully qualified name -> value
    index, in value order."""
    named: dict[str, int] = {}
    for i, ev in enumerate(plan.values):
        v = ev.val
        if isinstance(v, fbp.Tensor) and v.extra_tensor_info is not None and v.extra_tensor_info.fully_qualified_name:
            named.setdefault(v.extra_tensor_info.fully_qualified_name, i)
    return named


def _value_info(ev: fbp.EValue) -> TensorInfo | str:
    v = ev.val
    if isinstance(v, fbp.Tensor):
        order = tuple(v.dim_order) if len(v.dim_order) else tuple(range(len(v.sizes)))
        planned = v.allocation_info is not None or v.data_buffer_idx != 0
        dynamic = v.shape_dynamism != fbp.TensorShapeDynamism.STATIC
        return TensorInfo(tuple(v.sizes), v.scalar_type, order, dynamic, planned)
    return type(v).__name__ if v is not None else "None"


class EventTracer:
    """Records each instruction's wall time; attach with ``Method.set_event_tracer``."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float]] = []

    def record(self, instruction: int, seconds: float) -> None:
        self.events.append((instruction, seconds))

    # The hooks the executor calls on a traced run (ETDumpGen records more through the same three).
    def begin_run(self, executor: Any) -> None:
        pass

    def instruction(self, executor: Any, pc: int, start_ns: int, end_ns: int) -> None:
        self.record(pc, (end_ns - start_ns) / 1e9)

    def end_run(self, executor: Any, start_ns: int, end_ns: int) -> None:
        pass

    def clear(self) -> None:
        self.events.clear()


class Method:
    """A loaded method: planned memory allocated, kernels bound, delegates initialised."""

    def __init__(self, executor: MethodExecutor, meta: MethodMeta, seed: int | None = None):
        self._executor = executor
        self.metadata = meta
        self._generator = np.random.default_rng(seed)
        # One method's planned memory serves one run at a time: runs from several threads take turns.
        self._lock = threading.Lock()
        self._given_outputs: dict[int, tuple[np.ndarray, Any]] = {}  # index -> (array written, object returned)

    @property
    def name(self) -> str:
        return str(self.metadata.name)

    def execute(self, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        """Run the method on ``inputs`` (arrays, torch tensors, scalars, or anything with ``__array__``).

        Returns the outputs as copies: torch tensors when any input is a torch tensor (as ExecuTorch does),
        NumPy arrays otherwise; non-tensor outputs are Python scalars. With ``clone_outputs=False`` (as in
        ExecuTorch's ``run_method``) output arrays are views of the method's planned memory: the next run
        overwrites them, and writing to them changes the method's state (how an optimizer updates the
        trainable parameters a joint-graph method returns).
        """
        inputs, torch = self.read_inputs(inputs)
        ex = self._executor
        with self._lock:
            ex.set_inputs(inputs)
            use_generator(self._generator)
            ex.run()
            outputs = ex.outputs(clone_outputs)
            given = {i: self._write_given(i, outputs[i]) for i in self._given_outputs}
        outputs = outputs if torch is None else [_to_torch(v, torch) for v in outputs]
        for i, returned in given.items():
            outputs[i] = returned
        return outputs

    def read_inputs(self, inputs: Sequence[Any]) -> tuple[list[Any], Any]:
        """``inputs`` with torch tensors read as arrays (a tensor on a device the host cannot read is refused,
        naming the input), and the caller's torch module if any input was a torch tensor, else None."""
        inputs = list(inputs)
        torch = _torch_of(inputs)
        if torch is not None:
            inputs = [
                _from_torch(x, torch, f"input {i} of method {self.name!r}") if isinstance(x, torch.Tensor) else x
                for i, x in enumerate(inputs)
            ]
        return inputs, torch

    def set_output(self, value: Any, index: int = 0) -> None:
        """Have every later run write output ``index`` into ``value`` (an array, or a CPU torch tensor), which
        the run then returns in that place, as ExecuTorch's ``set_output``/``set_output_data_ptr``. Only a
        tensor output that the program does not memory-plan takes one (export with
        ``MemoryPlanningPass(alloc_graph_output=False)``); ``value`` must have its shape and dtype."""
        info = self.metadata.output_tensor_meta(index)  # IndexError naming the method and its output count
        if not isinstance(info, TensorInfo):
            raise InvalidInputError(
                f"output {index} of method {self.name!r} is a {info}, not a tensor; only tensor outputs take a "
                "caller's buffer"
            )
        if info.is_memory_planned():
            raise InvalidInputError(
                f"output {index} of method {self.name!r} is memory-planned: the program owns its memory. Export "
                "with MemoryPlanningPass(alloc_graph_output=False) to give outputs buffers of your own",
                code=Error.InvalidState,
            )
        torch = _torch_of([value])
        array = _from_torch(value, torch) if torch is not None else value
        if not isinstance(array, np.ndarray) or not array.flags.writeable:
            raise InvalidInputError(
                f"set_output expects a writable NumPy array or CPU torch tensor for output {index} of method "
                f"{self.name!r}; got {type(value).__name__}"
            )
        want_shape, want_dtype = tuple(info.sizes), info.numpy_dtype
        if array.dtype != want_dtype or (not info.dynamic and array.shape != want_shape):
            raise InvalidInputError(
                f"output {index} of method {self.name!r} is {want_dtype} {list(want_shape)}; the buffer given is "
                f"{array.dtype} {list(array.shape)}. Pass a buffer of that shape and dtype"
            )
        with self._lock:
            self._given_outputs[index] = (array, value)

    def _write_given(self, index: int, result: Any) -> Any:
        array, returned = self._given_outputs[index]
        if np.shape(result) != array.shape:
            raise InvalidInputError(
                f"output {index} of method {self.name!r} came out {list(np.shape(result))}, but the buffer given "
                f"with set_output is {list(array.shape)}; give a buffer of the output's size for these inputs"
            )
        np.copyto(array, result)
        return returned

    def outputs(self, clone_outputs: bool = True) -> list[Any]:
        """The output values as the last run left them (before any run: the planned memory's initial state,
        so a joint-graph method's parameters); ``clone_outputs`` as in :meth:`execute`. An output given a buffer
        with :meth:`set_output` is that buffer."""
        outputs = self._executor.outputs(clone_outputs)
        for i, (_, returned) in self._given_outputs.items():
            outputs[i] = returned
        return outputs

    __call__ = execute

    def set_seed(self, seed: int) -> None:
        """Restart this method's random-number stream (rand, normal, bernoulli, dropout, ...) from ``seed``.

        Each loaded method draws from its own generator; without a seed it starts from OS entropy.
        """
        self._generator = np.random.default_rng(seed)

    def get_attribute(self, name: str) -> Any:
        """A copy of the method's named tensor ``name`` as the last run left it (a mutable buffer's state), as
        ExecuTorch's ``Method::get_attribute``; ``metadata.attribute_tensor_meta`` describes them."""
        indices = self.metadata.attribute_values
        if name not in indices:
            raise InvalidInputError(
                f"method {self.name!r} has no attribute {name!r}; its attributes are {sorted(indices)} (a program "
                "names its mutable buffers when exported with ExecutorchBackendConfig(emit_mutable_buffer_names=True))",
                code=Error.NotFound,
            )
        with self._lock:
            return self._executor.value(indices[name])

    def set_event_tracer(self, tracer: EventTracer | ETDumpGen | None) -> None:
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


# Dtypes NumPy knows only through ml_dtypes: they cross to and from torch as same-width integers.
_BIT_VIEWS = {
    "bfloat16": "int16",
    "float8_e5m2": "uint8",
    "float8_e4m3fn": "uint8",
    "float8_e5m2fnuz": "uint8",
    "float8_e4m3fnuz": "uint8",
}


def _torch_of(values: Sequence[Any]) -> Any:
    """The caller's torch module if any of ``values`` is a torch tensor, else None; torch is never imported here."""
    torch = sys.modules.get("torch")
    if torch is None or not any(isinstance(v, torch.Tensor) for v in values):
        return None
    return torch


def _from_torch(tensor: Any, torch: Any, what: str = "the tensor") -> np.ndarray:
    device = tensor.device
    if device.type not in ("cpu", "cuda"):
        raise InvalidInputError(
            f"{what} is on device {device}; only CPU and CUDA tensors can be read by this runtime: move it "
            "first (x.cpu())"
        )
    tensor = tensor.detach().cpu()
    name = str(tensor.dtype).removeprefix("torch.")
    bits = _BIT_VIEWS.get(name)
    if bits is None:
        return tensor.numpy()
    return tensor.view(getattr(torch, bits)).numpy().view(getattr(ml_dtypes, name))


def _to_torch(value: Any, torch: Any) -> Any:
    if isinstance(value, list):
        return [_to_torch(v, torch) for v in value]
    if not isinstance(value, np.ndarray):
        return value
    bits = _BIT_VIEWS.get(value.dtype.name)
    if bits is None:
        return torch.from_numpy(value)
    return torch.from_numpy(value.view(np.dtype(bits))).view(getattr(torch, value.dtype.name))


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
        self.max_memory = runtime.max_planned_bytes
        """Bytes of planned memory one method of this program may allocate (``load_program(max_memory=)``)."""
        self.etdump: ETDumpGen | None = None
        self._methods: dict[str, Method] = {}

    def release_pages(self) -> None:
        """Let the OS drop the mapped file's pages from this process (``MADV_DONTNEED``), e.g. after a
        delegate has copied its weights into its own layout: pages read again later come back from the page
        cache on first touch, so nothing changes but the resident set, which then holds only what runs
        touch. No-op for programs loaded from bytes or where ``madvise`` is missing."""
        for holder in (self._keepalive, *self._data_keepalive):
            if isinstance(holder, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
                holder.madvise(mmap.MADV_DONTNEED)

    @property
    def method_names(self) -> set[str]:
        """The names of the program's methods, as a set (as ExecuTorch gives them)."""
        return set(self._plans)

    @property
    def num_methods(self) -> _Int:
        return _Int(len(self._plans))

    def get_method_name(self, index: int) -> str:
        """The name of method ``index``, in the order the program stores them."""
        return _nth(list(self._plans), index, "method", "<program>")

    def _plan(self, name: str) -> fbp.ExecutionPlan:
        plan = self._plans.get(name)
        if plan is None:
            raise MethodNotFoundError(f"the program has no method {name!r}; its methods are {sorted(self._plans)}")
        return plan

    def metadata(self, name: str) -> MethodMeta:
        """What method ``name`` takes and returns, without loading it."""
        plan = self._plan(name)
        values = plan.values

        def info(i: int) -> TensorInfo | str:
            if not 0 <= i < len(values):
                raise ProgramLoadError(f"method {name!r} refers to value {i} of {len(values)}")
            return _value_info(values[i])

        sizes = [int(s) for s in plan.non_const_buffer_sizes[1:]]
        ninstr = sum(len(c.instructions) for c in plan.chains)
        named = attribute_indices(plan)
        attributes = [_value_info(values[i]) for i in named.values()]
        return MethodMeta(
            name, [info(i) for i in plan.inputs], [info(i) for i in plan.outputs], sizes, ninstr, attributes, named
        )

    def load_method(self, name: str = "forward", seed: int | None = None, event_tracer: Any = None) -> Method:
        """Allocate planned memory, bind kernels and initialise delegates for method ``name``.

        As in ExecuTorch, the program keeps each method it loads: loading ``name`` again returns the same
        Method, with its state (a KV cache, a counter), unless ``seed`` or ``event_tracer`` asks for a new one.

        ``seed`` seeds the method's random-number generator (see :meth:`Method.set_seed`).
        ``event_tracer`` (an :class:`~edgetorch.runtime.etdump.ETDumpGen`, as in ExecuTorch's
        ``load_method(name, memory_manager, event_tracer)``) records the load and every run;
        by default the program's own ETDumpGen when it was loaded with ``enable_etdump=True``. A traced method
        keeps every copy instruction (no copy elision), so that each instruction reports its own event and
        output.
        """
        cached = seed is None and event_tracer is None
        if cached and name in self._methods:
            return self._methods[name]
        plan = self._plan(name)
        tracer = event_tracer if event_tracer is not None else self.etdump
        start = clock_ns()
        try:
            with tuning.loading():  # kernel choices timed while the method loads share one budget
                executor = MethodExecutor(plan, self, self.max_memory, elide=tracer is None)
        except (FormatError, FlatbufferError) as e:
            raise ProgramLoadError(str(e)) from None
        method = Method(executor, self.metadata(name), seed)
        if tracer is not None:
            end = clock_ns()
            if isinstance(tracer, ETDumpGen):
                tracer.log_profile("Method::init", start, end)
                tracer.log_profile("Program::load_method", start, end)
                tracer.track_method_memory(name, executor.arenas, executor.unplanned_bytes)
            method.set_event_tracer(tracer)
        if cached:
            self._methods[name] = method
        return method

    def has_etdump(self) -> bool:
        """Whether this program was loaded with ``enable_etdump=True``."""
        return self.etdump is not None

    def write_etdump_result_to_file(
        self, path: str | os.PathLike, debug_buffer_path: str | os.PathLike | None = None
    ) -> None:
        """Write the ETDump of every run of this program's methods (and the debug buffer), as ExecuTorch's
        pybindings do; the program must have been loaded with ``enable_etdump=True``."""
        if self.etdump is None:
            raise InvalidInputError(
                "this program records no ETDump; load it with Runtime.get().load_program(pte, enable_etdump=True)"
            )
        self.etdump.write_etdump(path, debug_buffer_path)

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
                f"{what} keeps its data outside the program, under key {key!r} of a .ptd file, and no data file "
                "loaded with the program holds that key; pass the .ptd written with the program: "
                "Runtime.get().load_program(pte, data_files=[ptd]) (or data_path=ptd)"
            )
        return data

    def add_data_file(self, data: str | os.PathLike | bytes | bytearray | memoryview | BinaryIO) -> None:
        """Make the tensors of a ``.ptd`` file (a path, its bytes, or a binary file object) available to methods
        loaded afterwards; ``ProgramLoadError`` if it is not one."""
        holder, raw = _open(data)
        try:
            entries = load_ptd(raw).named_data()
        except (FormatError, FlatbufferError) as e:
            where = data if isinstance(data, (str, os.PathLike)) else "<bytes>"
            raise ProgramLoadError(f"data file {where}: {e}") from None
        self.add_data_map(entries)
        self._data_keepalive.append(holder)

    def add_data_map(self, entries: dict[str, memoryview]) -> None:
        """Make external tensors (for example from a .ptd file) available to methods loaded afterwards."""
        self._external.update(entries)
        self._named = None

    def _segment(self, index: int) -> memoryview:
        try:
            return self._pte.segment(index)
        except FormatError as e:
            raise ProgramLoadError(str(e)) from None


class OperatorRegistry:
    """The operators this runtime has kernels for; ``Runtime.get().operator_registry``, as in ExecuTorch.

    ``allowed`` narrows it to a selection (see :class:`edgetorch.runtime.selective.SelectiveRuntime`).
    """

    def __init__(self, allowed: Iterable[str] | None = None):
        self._allowed = None if allowed is None else frozenset(allowed)

    @property
    def operator_names(self) -> set[str]:
        """Names as ``namespace::op.overload`` (for example ``"aten::add.out"``)."""
        if self._allowed is not None:
            return set(self._allowed)
        from edgetorch.runtime.kernels.registry import KERNELS

        return set(KERNELS)


class Runtime:
    """Entry point, as in ``executorch.runtime``: ``Runtime.get().load_program(path_or_bytes)``."""

    _instance: Runtime | None = None

    def __init__(self, max_planned_bytes: int = DEFAULT_MAX_PLANNED_BYTES):
        self.max_planned_bytes = max_planned_bytes
        self.backend_registry = BackendRegistry()
        self.operator_registry = OperatorRegistry()

    @classmethod
    def get(cls) -> Runtime:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def load_program(
        self,
        data: str | os.PathLike | bytes | bytearray | memoryview | BinaryIO,
        verification: Verification = Verification.InternalConsistency,
        data_files: Sequence[str | os.PathLike | bytes] = (),
        *,
        data_path: str | os.PathLike | bytes | None = None,
        max_memory: int | None = None,
        enable_etdump: bool = False,
        debug_buffer_size: int = 0,
    ) -> Program:
        """Load a .pte from a path, bytes, or a binary file object; files are memory-mapped, not copied.

        ``data_path`` (ExecuTorch's keyword) names one ``.ptd`` file holding tensors the program
        keeps outside itself; ``data_files`` takes several. ``max_memory`` caps the bytes of planned memory
        (and of any one tensor) a method of this program may allocate, checked before anything is allocated
        (default: the runtime's ``max_planned_bytes``, 32 GiB). ``enable_etdump`` traces every method
        loaded from the program into one ETDump (``debug_buffer_size`` > 0 also logs intermediate
        outputs); write it with ``program.write_etdump_result_to_file(path, debug_buffer_path)``.
        """
        if data_path is not None:
            data_files = [*data_files, data_path]
        keepalive, buf = _open(data)
        try:
            pte = load_pte(get_program_data(buf))  # a .bpte runs the program it bundles
        except (FormatError, FlatbufferError) as e:
            raise ProgramLoadError(str(e)) from None
        if verification is Verification.InternalConsistency:
            check_internal_consistency(pte)
        if isinstance(data, (str, os.PathLike)):
            warm.start(data, data_files)
        program = Program(pte, keepalive, self, verification)
        if max_memory is not None:
            if max_memory < 0:
                raise InvalidInputError(f"max_memory must be a number of bytes >= 0, got {max_memory}")
            program.max_memory = int(max_memory)
        for extra in data_files:
            program.add_data_file(extra)
        if enable_etdump:
            # no event for the load itself: ExecuTorch's runtime logs none (its tracer comes with the method)
            program.etdump = ETDumpGen(debug_buffer_size)
        return program


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
    """ExecuTorch's Module extension: a program loaded on first use, its methods loaded and cached by name.

    ``Module("model.pte", "model.ptd")`` as ExecuTorch's ``Module(file_path, data_map_path)``
    (``data_path`` may also list several ``.ptd`` files). Inputs go either straight to
    ``forward``/``execute``/``run_method``, or are staged first with ``set_inputs``/``set_input``.
    """

    def __init__(
        self,
        file_path: str | os.PathLike | bytes,
        data_path: str | os.PathLike | bytes | Sequence[str | os.PathLike | bytes] | None = None,
        *,
        verification: Verification = Verification.Minimal,
        event_tracer: ETDumpGen | None = None,
        enable_etdump: bool = False,
        debug_buffer_size: int = 0,
    ):
        if isinstance(data_path, Verification):
            raise TypeError("Module's second argument is data_path (a .ptd file); pass verification=... by keyword")
        if event_tracer is None and (enable_etdump or debug_buffer_size > 0):
            event_tracer = ETDumpGen(debug_buffer_size)
        self._event_tracer = event_tracer
        self._source = file_path
        self._data = [] if data_path is None else _as_list(data_path)
        self._verification = verification
        self._program: Program | None = None
        self._methods: dict[str, Method] = {}
        self._staged: dict[str, list[Any]] = {}

    def load(self, verification: Verification | None = None) -> None:
        """Load the program now (otherwise the first call that needs it does)."""
        if self._program is None:
            chosen = self._verification if verification is None else verification
            self._program = Runtime.get().load_program(self._source, chosen, self._data)

    def is_loaded(self) -> bool:
        return self._program is not None

    @property
    def program(self) -> Program:
        self.load()
        assert self._program is not None  # load() set it or raised
        return self._program

    def num_methods(self) -> int:
        return int(self.program.num_methods)

    def method_names(self) -> set[str]:
        return self.program.method_names

    def load_method(self, method_name: str = "forward") -> Method:
        if method_name not in self._methods:
            self._methods[method_name] = self.program.load_method(method_name, event_tracer=self._event_tracer)
        return self._methods[method_name]

    def load_bundled_input(self, bundle: Any, method_name: str = "forward", testset_idx: int = 0) -> None:
        """Stage the inputs of test case ``testset_idx`` of a BundledProgram (as read by
        ``edgetorch.runtime.bundled.load_bundled_program``) for ``method_name``."""
        self.set_inputs(method_name, bundled_inputs(bundle, method_name, testset_idx))
        if self._event_tracer is not None:
            self._event_tracer.set_bundled_input_index(testset_idx)

    def verify_result_with_bundled_expected_output(
        self, bundle: Any, method_name: str = "forward", testset_idx: int = 0, rtol: float = 1e-5, atol: float = 1e-8
    ) -> None:
        """Check the outputs of the last run of ``method_name`` against test case ``testset_idx``'s expected
        outputs; raises ``BundledVerificationError`` on a mismatch."""
        outputs = self.load_method(method_name).outputs()
        verify_outputs(
            outputs, bundled_expected_outputs(bundle, method_name, testset_idx), method_name, testset_idx, rtol, atol
        )

    def event_tracer(self) -> ETDumpGen | None:
        """The ETDumpGen given (or made by ``enable_etdump=True``), as ExecuTorch's ``Module::event_tracer()``."""
        return self._event_tracer

    def has_etdump(self) -> bool:
        return self._event_tracer is not None

    def write_etdump_result_to_file(
        self, path: str | os.PathLike, debug_buffer_path: str | os.PathLike | None = None
    ) -> None:
        """Write the ETDump of this module's runs (and the debug buffer), as ExecuTorch's pybindings do."""
        if self._event_tracer is None:
            raise InvalidInputError("this module records no ETDump; create it with Module(pte, enable_etdump=True)")
        self._event_tracer.write_etdump(path, debug_buffer_path)

    def is_method_loaded(self, method_name: str = "forward") -> bool:
        return method_name in self._methods

    def unload_method(self, method_name: str = "forward") -> bool:
        """Free a loaded method's memory (its mutable state starts over on the next load); False if not loaded."""
        self._staged.pop(method_name, None)
        if self._program is not None:
            self._program._methods.pop(method_name, None)
        return self._methods.pop(method_name, None) is not None

    def method_meta(self, method_name: str = "forward") -> MethodMeta:
        return self.program.metadata(method_name)

    def set_inputs(self, *args: Any) -> None:
        """Stage every input of a method: ``set_inputs(inputs)`` for forward, or ``set_inputs(method_name, inputs)``."""
        method_name, (inputs,) = _split_method_name(args, 1, "set_inputs(method_name, inputs)")
        inputs = list(inputs)
        expected = self.method_meta(method_name).num_inputs
        if len(inputs) != expected:
            raise InvalidInputError(f"method {method_name!r} takes {expected} inputs, got {len(inputs)}")
        self._staged[method_name] = inputs

    def set_input(self, *args: Any) -> None:
        """Stage one input: ``set_input(value, index)`` for forward, or ``set_input(method_name, value, index)``;
        ``value=None`` unstages it. A later run given fewer inputs takes the staged ones after them."""
        method_name, (value, index) = _split_method_name(args, 2, "set_input(method_name, value, index)")
        meta = self.method_meta(method_name)
        meta.input_tensor_meta(index)  # IndexError names the method and its input count
        staged = self._staged.setdefault(method_name, [_UNSET] * meta.num_inputs)
        staged[index] = _UNSET if value is None else value  # None clears it, as ExecuTorch's empty EValue

    def execute(self, method_name: str = "forward", inputs: Iterable[Any] | None = None) -> list[Any]:
        """Run ``method_name`` on ``inputs``, or on the inputs staged with ``set_inputs``/``set_input``."""
        if inputs is None:
            inputs = self._staged_inputs(method_name)
        else:
            inputs = list(inputs)
            staged = self._staged.get(method_name, [])
            if len(inputs) < len(staged):  # given inputs first, inputs staged at later indices after them
                inputs = self._staged_inputs(method_name, inputs + staged[len(inputs) :])
        return self.load_method(method_name).execute(inputs)

    def _staged_inputs(self, method_name: str, staged: list[Any] | None = None) -> list[Any]:
        staged = self._staged.get(method_name, []) if staged is None else staged
        missing = [i for i, v in enumerate(staged) if v is _UNSET]
        if missing or len(staged) != self.method_meta(method_name).num_inputs:
            raise InvalidInputError(
                f"method {method_name!r} has unset inputs {missing or 'all'}; "
                "call set_inputs/set_input first or pass the inputs to execute"
            )
        return staged

    def plan_execute(self, method_name: str = "forward", clone_outputs: bool = True) -> list[Any]:
        """Run ``method_name`` on the inputs staged with ``set_inputs``/``set_input``/``load_bundled_input``."""
        if not clone_outputs:
            return self.load_method(method_name).execute(self._staged_inputs(method_name), clone_outputs=False)
        return self.execute(method_name)

    def set_output(self, *args: Any) -> None:
        """Give an output a buffer of the caller's (see :meth:`Method.set_output`): ``set_output(value,
        index=0)`` for forward, or ``set_output(method_name, value, index=0)``."""
        if args and isinstance(args[0], str):
            method_name, rest = args[0], args[1:]
        else:
            method_name, rest = "forward", args
        if not 1 <= len(rest) <= 2:
            raise TypeError(
                f"expected set_output([method_name,] value, index=0), with method_name optional; got {len(args)} "
                "arguments"
            )
        self.load_method(method_name).set_output(*rest)

    def set_outputs(self, *args: Any) -> None:
        """Give every output a buffer: ``set_outputs(values)`` for forward, or ``set_outputs(method_name,
        values)``."""
        method_name, (values,) = _split_method_name(args, 1, "set_outputs(method_name, values)")
        values = list(values)
        expected = self.method_meta(method_name).num_outputs
        if len(values) != expected:
            raise InvalidInputError(f"method {method_name!r} has {expected} outputs, got {len(values)} buffers")
        for index, value in enumerate(values):
            self.set_output(method_name, value, index)

    def get_outputs(self, method_name: str = "forward") -> list[Any]:
        """The outputs of the last run of ``method_name`` (copies), as ExecuTorch's ``Module::get_outputs``."""
        if method_name not in self._methods:
            raise InvalidInputError(
                f"method {method_name!r} has not run in this module; call forward/execute first",
                code=Error.InvalidState,
            )
        return self._methods[method_name].outputs()

    def get_output(self, *args: Any) -> Any:
        """Output ``index`` of the last run: ``get_output(index=0)`` for forward, or ``get_output(method_name,
        index)``."""
        if not args or isinstance(args[0], str):
            method_name, index = (args[0] if args else "forward"), (args[1] if len(args) > 1 else 0)
        else:
            method_name, index = "forward", args[0]
        outputs = self.get_outputs(method_name)
        if not isinstance(index, int) or not -len(outputs) <= index < len(outputs):
            raise InvalidInputError(f"method {method_name!r} has {len(outputs)} outputs; index {index!r} is invalid")
        return outputs[index]

    def run_method(self, method_name: str, inputs: Sequence[Any] = ()) -> list[Any]:
        """ExecuTorch's pybinding name for :meth:`execute`."""
        return self.execute(method_name, inputs)

    def forward(self, *inputs: Any) -> list[Any]:
        """Run forward: ``forward([x, y])`` as in ExecuTorch, or ``forward(x, y)``; ``forward()`` uses staged inputs."""
        if not inputs:
            return self.execute("forward", None if "forward" in self._staged else ())
        if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)):
            return self.execute("forward", inputs[0])
        return self.execute("forward", inputs)

    __call__ = forward


_UNSET = object()


def _as_list(paths: Any) -> list[Any]:
    return [paths] if isinstance(paths, (str, os.PathLike, bytes, bytearray, memoryview)) else list(paths)


def _split_method_name(args: tuple, n: int, usage: str) -> tuple[str, tuple]:
    """Split ExecuTorch's overloads ``f(*rest)`` (forward) and ``f(method_name, *rest)``."""
    if len(args) == n:
        return "forward", args
    if len(args) == n + 1 and isinstance(args[0], str):
        return args[0], args[1:]
    raise TypeError(f"expected {usage}, with method_name optional (default 'forward'); got {len(args)} arguments")
