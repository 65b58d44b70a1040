"""Load time: a method's values and instructions become a flat list of bound steps. Run time: run the steps.

Two execution modes, chosen once per method at load:

* static (every tensor STATIC, only kernel and delegate calls): each step is a
  ``functools.partial`` over the arrays it reads and writes, and ``execute`` is
  ``for step in steps: step()``;
* dynamic (dynamic shapes, control flow, symbolic-size scalars): values live in
  a list, each step reads its arguments from it and stores what the kernel
  returns (a resized view of the planned slot), and a program counter follows
  JumpFalseCall and MoveCall.

Torch-free.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from edgetorch.errors import (
    DelegateLoadError,
    EdgetorchError,
    ExecutionError,
    InvalidInputError,
    ProgramLoadError,
)
from edgetorch.format import program as fbp
from edgetorch.runtime import kernels as _kernels  # noqa: F401  (registers the portable kernels)
from edgetorch.runtime.backends import get_backend
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY
from edgetorch.runtime.kernels.registry import lookup
from edgetorch.runtime.memory import TensorResizeError, allocate_arenas, check_dim_order, resize, view_of

# A program may jump backwards (loops); a run that takes more steps than this is stopped, never hangs.
MAX_STEPS_PER_RUN = 50_000_000


@dataclass
class TensorSlot:
    """What the plan says about one tensor value."""

    dtype: np.dtype
    sizes: tuple[int, ...]
    dim_order: list[int]
    dynamic: bool
    constant: bool


class _ListRef:
    """A list value whose items are other values read at run time (symbolic ints, resized tensors)."""

    __slots__ = ("items", "none_for_negative")

    def __init__(self, items: list[int], none_for_negative: bool = False):
        self.items = items
        self.none_for_negative = none_for_negative

    def resolve(self, vals: list) -> list:
        if self.none_for_negative:
            return [None if i < 0 else vals[i] for i in self.items]
        return [vals[i] for i in self.items]


def op_key(op: fbp.Operator) -> str:
    return f"{op.name}.{op.overload}" if op.overload else op.name


class MethodExecutor:
    """The bound form of one ExecutionPlan."""

    def __init__(self, plan: fbp.ExecutionPlan, program: Any, limit: int):
        self.plan = plan
        self.name = plan.name
        self._program = program
        if not plan.chains:
            self.instructions: list = []
        elif len(plan.chains) > 1:
            raise ProgramLoadError(f"method {plan.name!r} has {len(plan.chains)} chains; this runtime runs one")
        else:
            self.instructions = plan.chains[0].instructions
        nvals = len(plan.values)
        for i in list(plan.inputs) + list(plan.outputs):
            self._check_index(i, "input/output")
        self.arenas = allocate_arenas(list(plan.non_const_buffer_sizes), limit)
        self.slots: dict[int, TensorSlot] = {}
        self.bound: list[Any] = [None] * nvals
        self.vals: list[Any] = [None] * nvals
        for i, ev in enumerate(plan.values):
            self.vals[i] = self.bound[i] = self._make_value(i, ev.val, limit)
        self.static = self._is_static()
        self.operators = [op_key(op) for op in plan.operators]
        self.kernels = [lookup(name) for name in self.operators]
        self.delegates = [self._init_delegate(i, d) for i, d in enumerate(plan.delegates)]
        self.folded = 0
        self._viewed = self._view_bases() if self.static else set()
        self.step_pcs: list[int] = []
        self.steps: list[Callable] = []
        for pc, ins in enumerate(self.instructions):
            step = self._bind(pc, ins)
            if step is not None:
                self.steps.append(step)
                self.step_pcs.append(pc)
        self.tracer: Any = None

    # ------------------------------------------------------------------ values

    def _check_index(self, i: int, what: str) -> int:
        if not 0 <= i < len(self.plan.values):
            raise ProgramLoadError(
                f"method {self.name!r}: {what} refers to value {i}, but the method has {len(self.plan.values)} values"
            )
        return i

    def _make_value(self, i: int, v: Any, limit: int) -> Any:
        if v is None or isinstance(v, fbp.Null):
            return None
        if isinstance(v, fbp.Int):
            return v.int_val
        if isinstance(v, fbp.Bool):
            return bool(v.bool_val)
        if isinstance(v, fbp.Double):
            return v.double_val
        if isinstance(v, fbp.String):
            return v.string_val
        if isinstance(v, (fbp.DoubleList, fbp.BoolList)):
            return list(v.items)
        if isinstance(v, fbp.IntList):
            return _ListRef([self._check_index(j, f"int list {i}") for j in v.items])
        if isinstance(v, fbp.TensorList):
            return _ListRef([self._check_index(j, f"tensor list {i}") for j in v.items])
        if isinstance(v, fbp.OptionalTensorList):
            return _ListRef([j if j < 0 else self._check_index(j, f"tensor list {i}") for j in v.items], True)
        if isinstance(v, fbp.Tensor):
            return self._make_tensor(i, v, limit)
        raise ProgramLoadError(f"value {i} has unsupported kind {type(v).__name__}")

    def _make_tensor(self, i: int, t: fbp.Tensor, limit: int) -> np.ndarray:
        what = f"tensor value {i} of method {self.name!r}"
        dtype = SCALAR_TO_NUMPY.get(t.scalar_type)
        if dtype is None:
            raise ProgramLoadError(f"{what} has scalar type {t.scalar_type!r}, which this runtime does not support")
        sizes = [int(s) for s in t.sizes]
        if any(s < 0 for s in sizes):
            raise ProgramLoadError(f"{what} has negative sizes {sizes}")
        order = check_dim_order(t.dim_order, len(sizes), what)
        nbytes = math.prod(sizes) * dtype.itemsize
        if nbytes > limit:
            raise ProgramLoadError(f"{what} claims {nbytes} bytes, more than this runtime's limit of {limit}")
        program = self._program
        constant = t.data_buffer_idx > 0 and t.allocation_info is None
        info = t.extra_tensor_info
        external = info is not None and info.location == fbp.TensorDataLocation.EXTERNAL
        dynamic = t.shape_dynamism != fbp.TensorShapeDynamism.STATIC
        self.slots[i] = TensorSlot(dtype, tuple(sizes), order, dynamic, constant)
        if external and t.allocation_info is None:
            return view_of(program.external_tensor(info.fully_qualified_name, what), 0, dtype, sizes, order, what)
        if constant:
            buf, offset = program.constant_data(t.data_buffer_idx, what)
            return view_of(buf, offset, dtype, sizes, order, what)
        if t.allocation_info is not None:
            a = t.allocation_info
            if not 0 < a.memory_id < len(self.arenas):
                raise ProgramLoadError(
                    f"{what} is planned in memory id {a.memory_id}, but the method has "
                    f"{len(self.arenas) - 1} planned buffers (ids 1..{len(self.arenas) - 1})"
                )
            arr = view_of(self.arenas[a.memory_id], a.memory_offset, dtype, sizes, order, what)
            if external:  # mutable state whose initial value is in a .ptd file (trainable weights, for example)
                data = program.external_tensor(info.fully_qualified_name, what)
                np.copyto(arr, view_of(data, 0, dtype, sizes, order, what))
            elif t.data_buffer_idx > 0:
                seg_index = info.mutable_data_segments_idx if info is not None else 0
                buf, offset = program.mutable_data(seg_index, t.data_buffer_idx, what)
                np.copyto(arr, view_of(buf, offset, dtype, sizes, order, what))
            return arr
        return np.zeros(sizes, dtype)  # unplanned: receives data at input time or from a delegate

    def _is_static(self) -> bool:
        if any(s.dynamic for s in self.slots.values()):
            return False
        for i in self.plan.inputs:
            if i not in self.slots:
                return False
        for ins in self.instructions:
            a = ins.instr_args
            if not isinstance(a, (fbp.KernelCall, fbp.DelegateCall)):
                return False
            if isinstance(a, fbp.KernelCall) and 0 <= a.op_index < len(self.plan.operators):
                _fn, nargs = lookup(op_key(self.plan.operators[a.op_index]))
                if any(
                    j not in self.slots and not isinstance(self.bound[j], _ListRef)
                    for j in a.args[nargs:]
                    if 0 <= j < len(self.bound)
                ):
                    return False
        return True

    # ------------------------------------------------------------------ steps

    def _arg(self, j: int) -> Any:
        v = self.bound[j]
        return v.resolve(self.bound) if isinstance(v, _ListRef) else v

    def _bind(self, pc: int, ins: fbp.Instruction) -> Callable | None:
        a = ins.instr_args
        if isinstance(a, fbp.KernelCall):
            if not 0 <= a.op_index < len(self.kernels):
                raise ProgramLoadError(
                    f"instruction {pc} calls operator {a.op_index}, but the method has {len(self.kernels)}"
                )
            fn, nargs = self.kernels[a.op_index]
            args = [self._check_index(j, f"instruction {pc}") for j in a.args]
            if len(args) < nargs:
                raise ProgramLoadError(
                    f"instruction {pc} passes {len(args)} arguments to {self.operators[a.op_index]}, whose kernel takes {nargs}"
                )
            return self._kernel_step(fn, args[:nargs], _results(fn, args, nargs), self.operators[a.op_index])
        if isinstance(a, fbp.DelegateCall):
            if not 0 <= a.delegate_index < len(self.delegates):
                raise ProgramLoadError(
                    f"instruction {pc} calls delegate {a.delegate_index}, but the method has {len(self.delegates)}"
                )
            return self._delegate_step(
                self.delegates[a.delegate_index], [self._check_index(j, f"instruction {pc}") for j in a.args], pc
            )
        if isinstance(a, fbp.MoveCall):
            src, dst, vals = self._check_index(a.move_from, "move"), self._check_index(a.move_to, "move"), self.vals

            def move() -> None:
                vals[dst] = vals[src]

            return move
        if isinstance(a, fbp.JumpFalseCall):
            cond, dest, vals = self._check_index(a.cond_value_index, "jump"), a.destination_instruction, self.vals
            if not 0 <= dest <= len(self.instructions):
                raise ProgramLoadError(f"instruction {pc} jumps to {dest}, outside 0..{len(self.instructions)}")

            def jump_false() -> int | None:
                return None if bool(vals[cond]) else dest

            return jump_false
        if isinstance(a, fbp.FreeCall):
            self._check_index(a.value_index, "free")
            return lambda: None
        raise ProgramLoadError(f"instruction {pc} has unsupported kind {type(a).__name__}")

    def _kernel_step(self, fn: Callable, params: list[int], rets: list[int], name: str) -> Callable | None:
        if self.static:
            args = [self._arg(j) for j in params]
            if self._foldable(fn, params, rets, name) and self._fold(fn, args, params, rets):
                return None
            return functools.partial(fn, *args)
        vals, bound, slots = self.vals, self.bound, self.slots
        outs = set(rets).union(self._items(rets))
        args: list[Any] = []
        reads: list[tuple[int, int]] = []
        lists: list[tuple[int, _ListRef, list]] = []
        for p, j in enumerate(params):
            v = bound[j]
            if j in outs and j in slots:
                args.append(v)  # the planned slot at its upper-bound shape; the kernel resizes it
            elif isinstance(v, _ListRef):
                args.append(None)
                # A list of outs (split_copy's) holds the planned slots; a list the kernel reads, the current values.
                lists.append((p, v, bound if j in outs or all(i in outs for i in v.items) else vals))
            elif j in slots and slots[j].constant:
                args.append(v)
            else:
                args.append(None)
                reads.append((p, j))
        targets = [bound[j].items if isinstance(bound[j], _ListRef) else j for j in rets]
        if len(rets) == 1 and isinstance(targets[0], int):
            r0 = rets[0]

            def step() -> None:
                for p, j in reads:
                    args[p] = vals[j]
                for p, ref, source in lists:
                    args[p] = ref.resolve(source)
                vals[r0] = fn(*args)

            return step

        def step_many() -> None:
            for p, j in reads:
                args[p] = vals[j]
            for p, ref, source in lists:
                args[p] = ref.resolve(source)
            result = fn(*args)
            for target, r in zip(targets, (result,) if len(targets) == 1 else result):
                if isinstance(target, int):
                    vals[target] = r
                else:  # a TensorList result: its items are the values later instructions read
                    for i, t in zip(target, r):
                        vals[i] = t

        return step_many

    def _planned_range(self, j: int) -> tuple[int, int, int] | None:
        t = self.plan.values[j].val
        if not isinstance(t, fbp.Tensor) or t.allocation_info is None:
            return None
        a, nbytes = t.allocation_info, self.bound[j].nbytes
        return a.memory_id, a.memory_offset, a.memory_offset + nbytes

    def _items(self, indices: Any) -> list[int]:
        """Value indices with every list value replaced by the values it holds; out-of-range ones are left to
        :meth:`_bind` to report."""
        n, found = len(self.bound), []
        for j in indices:
            if 0 <= j < n:
                v = self.bound[j]
                found.extend((i for i in v.items if 0 <= i < n) if isinstance(v, _ListRef) else (j,))
        return found

    def _written(self, a: Any) -> list[int]:
        """The values an instruction writes: a kernel's results, every argument of a delegate."""
        if isinstance(a, fbp.KernelCall) and 0 <= a.op_index < len(self.plan.operators):
            fn, nargs = lookup(op_key(self.plan.operators[a.op_index]))
            return self._items(_results(fn, a.args, nargs))
        return self._items(a.args) if isinstance(a, fbp.DelegateCall) else []

    def _view_bases(self) -> set[int]:
        """Computed tensors whose planned memory a view reads: their results must keep landing in that memory.

        ExecuTorch emits a static ``view`` as a second tensor planned over its base's bytes, with no
        instruction. Its base is the last result overlapping those bytes before the view's first reader (the
        plan keeps the base alive while the view is read, so nothing else writes there in between).
        """
        writes = [self._written(ins.instr_args) for ins in self.instructions]
        written = set(self.plan.inputs).union(*writes)
        views = {}
        for j, slot in self.slots.items():
            r = None if j in written or slot.constant else self._planned_range(j)
            if r is not None and r[1] < r[2]:
                views[j] = r
        ranges = [[(j, self._planned_range(j)) for j in w] for w in writes]
        readers = [self._items(getattr(ins.instr_args, "args", ())) for ins in self.instructions]
        bases: set[int] = set()
        for pc, reads in enumerate([*readers, list(self.plan.outputs)]):
            for v in views.keys() & set(reads):
                mem_id, lo, hi = views.pop(v)
                for before in reversed(ranges[:pc]):
                    hits = [j for j, r in before if r and r[0] == mem_id and r[1] < hi and lo < r[2]]
                    if hits:
                        bases.update(hits)
                        break
        return bases

    def _foldable(self, fn: Callable, params: list[int], rets: list[int], name: str) -> bool:
        """True when every tensor the kernel reads (none, for ``arange`` or ``full``) is a constant: its result is
        then computed once, at load.

        In-place ops (``aten::copy_``: they update state each call) and impure kernels (random) never fold.
        """
        if getattr(fn, "impure", False) or not rets or name.split(".")[0].endswith("_"):
            return False
        reads = [j for j in self._items(params) if j not in rets and j in self.slots]
        if not (all(self.slots[j].constant for j in reads) and all(j in self.slots for j in rets)):
            return False
        return not any(j in self._viewed for j in rets)

    def _fold(self, fn: Callable, args: list[Any], params: list[int], rets: list[int]) -> bool:
        # The result gets memory of its own: its planned slot is shared with other tensors over time.
        private = {j: np.empty_like(self.bound[j]) for j in rets}
        try:
            result = fn(*[private.get(j, a) if j in rets else a for j, a in zip(params, args)])
        except Exception:
            return False  # left as a step: if it fails again at run time, the error names the instruction
        results = result if len(rets) > 1 else (result,)
        for j, r in zip(rets, results):
            self.bound[j] = self.vals[j] = r
            self.slots[j].constant = True
        self.folded += 1
        return True

    def _init_delegate(self, index: int, d: fbp.BackendDelegate) -> tuple[Any, Any]:
        backend = get_backend(d.id)
        processed = self._program.delegate_data(d.processed, f"delegate {index} ({d.id}) of method {self.name!r}")
        specs = {s.key: bytes(s.value) for s in d.compile_specs}
        try:
            return backend, backend.init(processed, specs, self._program.named_data)
        except EdgetorchError:
            raise
        except Exception as e:
            raise DelegateLoadError(
                f"method {self.name!r}: backend {d.id!r} could not initialise delegate {index}: {type(e).__name__}: {e}"
            ) from e

    def _delegate_outputs(self, pc: int, args: list[int]) -> set[int]:
        """The dynamic-shape tensors among a delegate call's arguments that the delegate writes.

        A DelegateCall lists inputs then outputs without saying where one ends. An output here is a planned,
        dynamic tensor that is no method input, no kernel's result and no argument of an earlier delegate call:
        nothing but this call produces it, so it must get its planned slot (at the upper bound) to resize.
        """
        produced = set(self.plan.inputs)
        for before, ins in enumerate(self.instructions):
            a = ins.instr_args
            if isinstance(a, fbp.KernelCall) or (isinstance(a, fbp.DelegateCall) and before < pc):
                produced.update(self._written(a))
        slots = self.slots
        return {j for j in args if j in slots and slots[j].dynamic and not slots[j].constant and j not in produced}

    def _delegate_step(self, delegate: tuple[Any, Any], args: list[int], pc: int) -> Callable:
        backend, handle = delegate
        vals = self.vals
        if self.static:
            arrays = [self._arg(j) for j in args]

            def run_static() -> None:
                result = backend.execute(handle, arrays)
                if result is not None:
                    for dst, r in zip(arrays[len(arrays) - len(result) :], result):
                        if r is not dst:
                            np.copyto(dst, r)

            return run_static

        outputs = self._delegate_outputs(pc, args)
        source = [self.bound if j in outputs else vals for j in args]
        written = [(k, j) for k, j in enumerate(args) if j in outputs]

        def run() -> None:
            current = [values[j] for values, j in zip(source, args)]
            result = backend.execute(handle, current)
            for k, j in written:  # written at their planned (upper-bound) shape unless the result says otherwise
                vals[j] = current[k]
            if result is not None:
                for j, r in zip(args[len(args) - len(result) :], result):
                    vals[j] = r

        return run

    # ------------------------------------------------------------------ run

    def set_inputs(self, inputs: list[Any]) -> None:
        plan = self.plan
        if len(inputs) != len(plan.inputs):
            raise InvalidInputError(f"method {self.name!r} expects {len(plan.inputs)} inputs, got {len(inputs)}")
        for n, (j, x) in enumerate(zip(plan.inputs, inputs)):
            slot = self.slots.get(j)
            if slot is None:
                self.vals[j] = _scalar_input(n, x, self.bound[j], self.name)
                continue
            arr = _as_array(n, x, slot, self.name)
            if self.static:
                np.copyto(self.bound[j], arr)
            else:
                view = resize(self.bound[j], arr.shape) if arr.shape != slot.sizes else self.bound[j]
                np.copyto(view, arr)
                self.vals[j] = view

    def run(self) -> None:
        pc, tracer = 0, self.tracer
        try:
            if self.static and tracer is None:
                for pc, step in enumerate(self.steps):  # noqa: B007  (pc names the failing step below)
                    step()
                return
            # Traced runs and dynamic runs share this loop, so both follow jumps and both stop runaway loops.
            steps, n, count, jumps, clock = self.steps, len(self.steps), 0, not self.static, time.perf_counter_ns
            if tracer is not None:
                tracer.begin_run(self)
                start = clock()
            while pc < n:
                if tracer is None:
                    nxt = steps[pc]()
                else:
                    tracer.current = ipc = self.step_pcs[pc]
                    t0 = clock()
                    nxt = steps[pc]()
                    tracer.instruction(self, ipc, t0, clock())
                pc = nxt if jumps and nxt is not None else pc + 1
                count += 1
                if count > MAX_STEPS_PER_RUN:
                    break
        except TensorResizeError as e:
            raise self._named(e) from e
        except Exception as e:
            ipc = self.step_pcs[pc] if pc < len(self.step_pcs) else pc
            what = self.describe(ipc)
            raise ExecutionError(
                f"method {self.name!r} failed at instruction {ipc} ({what}): {type(e).__name__}: {e}", ipc, what
            ) from e
        if pc < n:
            raise ExecutionError(f"method {self.name!r} ran more than {MAX_STEPS_PER_RUN} instructions; stopped")
        if tracer is not None:
            tracer.end_run(self, start, clock())

    def _named(self, e: TensorResizeError) -> TensorResizeError:
        """``e`` restated with the value whose planned slot was too small and the instruction writing it."""
        j = next((j for j, v in enumerate(self.bound) if v is e.planned), None)
        if j is None:
            return e
        writer = next((pc for pc, ins in enumerate(self.instructions) if j in self._written(ins.instr_args)), None)
        at = "" if writer is None else f" at instruction {writer} ({self.describe(writer)})"
        return TensorResizeError(
            f"method {self.name!r}{at}: tensor value {j} is planned for at most {e.planned.size} elements "
            f"(upper-bound shape {list(e.planned.shape)}), but this run needs shape {list(e.shape)} "
            f"({math.prod(e.shape)} elements); re-export the program with larger dynamic-shape bounds",
            e.planned,
            e.shape,
        )

    def event_name(self, pc: int) -> tuple[str, str]:
        """ExecuTorch's event tracer names for instruction ``pc``: (``OPERATOR_CALL``, ``op.overload``),
        (``DELEGATE_CALL``, backend id), or the instruction kind twice."""
        a = self.instructions[pc].instr_args
        if isinstance(a, fbp.KernelCall):
            return "OPERATOR_CALL", self.operators[a.op_index]
        if isinstance(a, fbp.DelegateCall):
            return "DELEGATE_CALL", self.plan.delegates[a.delegate_index].id
        return type(a).__name__, type(a).__name__

    def instruction_outputs(self, pc: int) -> list[Any]:
        """The values instruction ``pc`` wrote, as they are now (views of planned memory, not copies)."""
        source = self.bound if self.static else self.vals
        values = [source[j] for j in self._written(self.instructions[pc].instr_args)]
        return [v.resolve(source) if isinstance(v, _ListRef) else v for v in values]

    def describe(self, pc: int) -> str:
        """A short human name for instruction ``pc``: its operator, backend or kind."""
        if not 0 <= pc < len(self.instructions):
            return "end of program"
        a = self.instructions[pc].instr_args
        if isinstance(a, fbp.KernelCall):
            return self.operators[a.op_index]
        if isinstance(a, fbp.DelegateCall):
            return f"delegate {self.plan.delegates[a.delegate_index].id}"
        return type(a).__name__

    def outputs(self, clone: bool = True) -> list[Any]:
        """The output values; with ``clone=False`` tensors are the method's own memory (see Method.execute)."""
        source = self.bound if self.static else self.vals
        out = []
        for j in self.plan.outputs:
            v = source[j]
            if isinstance(v, _ListRef):
                v = v.resolve(source)
            if isinstance(v, np.ndarray):
                out.append(np.array(v, copy=clone))
            elif isinstance(v, list):
                out.append([np.array(t, copy=clone) if isinstance(t, np.ndarray) else t for t in v])
            else:
                out.append(v)
        return out


def _results(fn: Callable, args: list[int], nargs: int) -> list[int]:
    """The values a KernelCall writes: those after the kernel's arguments, or the argument it resizes in place
    (``et_copy_index`` grows its accumulator and has no result value)."""
    resized = getattr(fn, "resizes_arg", None)
    if len(args) == nargs and resized is not None and resized < nargs:
        return [args[resized]]
    return list(args[nargs:])


def _as_array(n: int, x: Any, slot: TensorSlot, method: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != slot.dtype:
        if arr.ndim == 0 and not isinstance(x, np.ndarray) and np.can_cast(arr, slot.dtype, "same_kind"):
            arr = arr.astype(slot.dtype)
        else:
            raise InvalidInputError(
                f"input {n} of method {method!r} must have dtype {slot.dtype}, got {arr.dtype}; "
                f"convert it first (for example x.astype(np.{slot.dtype}))"
            )
    if arr.ndim != len(slot.sizes):
        raise InvalidInputError(
            f"input {n} of method {method!r} must have {len(slot.sizes)} dimensions (shape {list(slot.sizes)}), "
            f"got shape {list(arr.shape)}"
        )
    for d, (got, want) in enumerate(zip(arr.shape, slot.sizes)):
        if slot.dynamic and got > want:
            raise InvalidInputError(
                f"input {n} of method {method!r}: dimension {d} is {got}, above its upper bound {want}; "
                "re-export with a larger bound to run this size"
            )
        if not slot.dynamic and got != want:
            raise InvalidInputError(
                f"input {n} of method {method!r} must have shape {list(slot.sizes)}, got {list(arr.shape)} "
                f"(dimension {d} is static)"
            )
    return arr


def _scalar_input(n: int, x: Any, planned: Any, method: str) -> Any:
    if isinstance(planned, bool):
        kinds = (bool, np.bool_)
    elif isinstance(planned, int):
        kinds = (int, np.integer)
    elif isinstance(planned, float):
        kinds = (int, float, np.integer, np.floating)
    else:
        return x
    if hasattr(x, "item") and getattr(x, "ndim", 0) == 0:
        x = x.item()
    if not isinstance(x, kinds) or (isinstance(planned, int) and not isinstance(planned, bool) and isinstance(x, bool)):
        raise InvalidInputError(
            f"input {n} of method {method!r} must be a {type(planned).__name__}, got {type(x).__name__}"
        )
    return type(planned)(x)
