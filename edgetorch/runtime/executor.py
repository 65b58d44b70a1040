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
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from edgetorch.errors import (
    DelegateLoadError,
    EdgetorchError,
    Error,
    ExecutionError,
    InvalidInputError,
    ProgramLoadError,
)
from edgetorch.format import program as fbp
from edgetorch.format.printer import format_instruction
from edgetorch.runtime.backends import get_backend
from edgetorch.runtime.copy_elision import elide_copies
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY
from edgetorch.runtime.folding import fold, foldable
from edgetorch.runtime.fusion import fuse_steps
from edgetorch.runtime.kernels import blas_threads, compiled
from edgetorch.runtime.kernels.registry import lookup, required_parameters
from edgetorch.runtime.loops import jump_budget
from edgetorch.runtime.memory import (
    TensorResizeError,
    allocate_arenas,
    check_dim_order,
    mark_static,
    resize,
    view_of,
)
from edgetorch.runtime.plan_analysis import PlanFacts, kernel_results, op_key
from edgetorch.runtime.static_fusion import fuse_static
from edgetorch.runtime.values import ListRef, TensorSlot

# The events ExecuTorch's runtime names its control instructions by.
_CONTROL_EVENTS = {fbp.JumpFalseCall: "JF_CALL", fbp.MoveCall: "MOVE_CALL", fbp.FreeCall: "FREE_CALL"}


class ProgramData(Protocol):
    """What the executor needs from the loaded program: the bytes its values and delegates point to."""

    @property
    def named_data(self) -> Mapping[str, memoryview]: ...

    def constant_data(self, index: int, what: str) -> tuple[memoryview, int]: ...

    def mutable_data(self, seg_index: int, index: int, what: str) -> tuple[memoryview, int]: ...

    def delegate_data(self, ref: fbp.BackendDelegateDataReference | None, what: str) -> memoryview: ...

    def external_tensor(self, key: str | None, what: str) -> memoryview: ...

    def release_pages(self) -> None: ...


class MethodExecutor:
    """The bound form of one ExecutionPlan."""

    def __init__(self, plan: fbp.ExecutionPlan, program: ProgramData, limit: int, elide: bool = True):
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
        _check_host_memory(plan)
        self.arenas = allocate_arenas(list(plan.non_const_buffer_sizes), limit)
        # Unplanned tensors (inputs, delegate outputs) are allocated here too: they share what is left of the limit.
        self._unplanned_budget = limit - sum(a.nbytes for a in self.arenas if a is not None)
        self.unplanned_bytes: list[int] = []  # the size of each unplanned tensor, in allocation order
        self.slots: dict[int, TensorSlot] = {}
        # Two views of the values, not two copies: ``bound[j]`` is value j as loaded (a planned slot at its
        # upper-bound shape, a constant, a list reference), fixed after load; kernels resize into it.
        # ``vals[j]`` is its current value in dynamic mode (a resized view, a moved value, a scalar input).
        # Static mode reads only ``bound``.
        self.bound: list[Any] = [None] * nvals
        self.vals: list[Any] = [None] * nvals
        for i, ev in enumerate(plan.values):
            self.vals[i] = self.bound[i] = self._make_value(i, ev.val, limit)
        for n, j in enumerate(plan.inputs):
            if isinstance(self.bound[j], np.ndarray) and not self.bound[j].flags.writeable:
                raise ProgramLoadError(
                    f"method {self.name!r}: input {n} is value {j}, a constant tensor; an input must be a planned "
                    "or unplanned tensor or a scalar. The file is damaged or was not written by an ExecuTorch emitter"
                )
        self.facts = PlanFacts(plan, self.instructions, self.slots, self.bound)
        # A program may jump backwards (loops): a run taking more jumps than its loops allow is stopped (loops.py).
        self.jump_budget = jump_budget(self.instructions, plan.values)
        self.static = self._is_static()
        if self.static:
            # A static method returns its planned slots whole: a kernel may not write a smaller result into one
            # (the rest would be returned stale). A dynamic method stores each result's own view, so a kernel
            # shrinking a static tensor there returns what it computed (ExecuTorch's runtime refuses that too).
            for j, slot in self.slots.items():
                if not slot.constant:
                    mark_static(self.bound[j])
        self.operators = [op_key(op) for op in plan.operators]
        self.kernels = [lookup(name) for name in self.operators]
        self.delegates = [self._init_delegate(i, d) for i, d in enumerate(plan.delegates)]
        self.folded = 0
        self._viewed = self.facts.view_bases() if self.static else set()
        self.steps, self.step_pcs = self._bind_all(set())
        # Static copies that keep their input's element order become views of it (copy_elision.py), after folding
        # (a folded copy has no step; a folded value is never computed, so no view may read its planned memory):
        # the steps are bound again to read the views.
        self.elided = elide_copies(self, set(self.step_pcs)) if elide else set()
        if self.elided:
            self.steps, self.step_pcs = self._bind_all(self.elided, set(self.step_pcs))
        # Untraced runs take the fused steps: short element-wise chains as one step each (dynamic methods), batch
        # norms with their clamps and safe softmaxes (static ones).
        self.fused = fuse_static(self) if self.static else fuse_steps(self)
        # whether BLAS keeps to one thread while the fused steps run (the packed GEMM's threads take the cores)
        self.own_threads = self.fused is not None and compiled.own_threads(self.fused[0])
        self.blas = blas_threads.Adaptive()  # BLAS's threads or one, as timed here when no kernel splits
        self.tracer: Any = None
        self._by_pc: list[Callable | None] | None = None  # traced runs: each instruction's step, if it has one

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
            return ListRef([self._check_index(j, f"int list {i}") for j in v.items])
        if isinstance(v, fbp.TensorList):
            return ListRef([self._check_index(j, f"tensor list {i}") for j in v.items])
        if isinstance(v, fbp.OptionalTensorList):
            return ListRef([j if j < 0 else self._check_index(j, f"tensor list {i}") for j in v.items], True)
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
            raise ProgramLoadError(
                f"{what} claims {nbytes} bytes, more than the memory limit of {limit}; if the program is genuine, "
                "raise the limit with load_program(..., max_memory=...)"
            )
        program = self._program
        constant = t.data_buffer_idx > 0 and t.allocation_info is None
        info = t.extra_tensor_info
        external = info is not None and info.location == fbp.TensorDataLocation.EXTERNAL
        key = info.fully_qualified_name if info is not None else None  # an external tensor's name in the .ptd
        dynamic = t.shape_dynamism != fbp.TensorShapeDynamism.STATIC
        self.slots[i] = TensorSlot(dtype, tuple(sizes), order, dynamic, constant)
        if external and t.allocation_info is None:
            return view_of(program.external_tensor(key, what), 0, dtype, sizes, order, what)
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
            arena = self.arenas[a.memory_id]
            assert arena is not None  # only id 0 (the constant pool, refused above) has no arena
            arr = view_of(arena, a.memory_offset, dtype, sizes, order, what)
            if external:  # mutable state whose initial value is in a .ptd file (trainable weights, for example)
                data = program.external_tensor(key, what)
                np.copyto(arr, view_of(data, 0, dtype, sizes, order, what))
            elif t.data_buffer_idx > 0:
                seg_index = info.mutable_data_segments_idx if info is not None else 0
                buf, offset = program.mutable_data(seg_index, t.data_buffer_idx, what)
                np.copyto(arr, view_of(buf, offset, dtype, sizes, order, what))
            return arr
        self._unplanned_budget -= nbytes
        if self._unplanned_budget < 0:
            raise ProgramLoadError(
                f"{what} would take the method's memory past the limit of {limit} bytes (planned buffers plus "
                "unplanned tensors); if the program is genuine, raise the limit with load_program(..., max_memory=...)"
            )
        self.unplanned_bytes.append(nbytes)
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
                    j not in self.slots and not isinstance(self.bound[j], ListRef)
                    for j in a.args[nargs:]
                    if 0 <= j < len(self.bound)
                ):
                    return False
        return True

    # ------------------------------------------------------------------ steps

    def _bind_all(self, skip: set[int], only: set[int] | None = None) -> tuple[list[Callable], list[int]]:
        """A step for every instruction but those in ``skip`` (and outside ``only``, when given), and each one's
        instruction index; folded instructions bind no step."""
        steps: list[Callable] = []
        pcs: list[int] = []
        for pc, ins in enumerate(self.instructions):
            if pc in skip or (only is not None and pc not in only):
                continue
            step = self._bind(pc, ins)
            if step is not None:
                steps.append(step)
                pcs.append(pc)
        return steps, pcs

    def _arg(self, j: int) -> Any:
        v = self.bound[j]
        return v.resolve(self.bound) if isinstance(v, ListRef) else v

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
            for p, name, what in required_parameters(fn, nargs):
                if self.bound[args[p]] is None:
                    raise ProgramLoadError(
                        f"method {self.name!r}: instruction {pc} ({self.operators[a.op_index]}) passes value "
                        f"{args[p]}, which is None, as its argument {name!r}; the kernel needs {what} there. The "
                        "program is damaged or was not written by an ExecuTorch emitter: re-export it"
                    )
            return self._kernel_step(fn, args[:nargs], kernel_results(fn, args, nargs), self.operators[a.op_index])
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
            args: list[Any] = [self._arg(j) for j in params]
            if foldable(self.facts, fn, params, rets, name, self._viewed) and fold(
                self.facts, self.vals, fn, args, params, rets
            ):
                self.folded += 1
                return None
            return functools.partial(fn, *args)
        vals, bound, slots = self.vals, self.bound, self.slots
        outs = set(rets).union(self.facts.items(rets))
        args = []
        reads: list[tuple[int, int]] = []
        lists: list[tuple[int, ListRef, list]] = []
        for p, j in enumerate(params):
            v = bound[j]
            if j in outs and j in slots:
                args.append(v)  # the planned slot at its upper-bound shape; the kernel resizes it
            elif isinstance(v, ListRef):
                args.append(None)
                # A list of outs (split_copy's) holds the planned slots; a list the kernel reads, the current values.
                lists.append((p, v, bound if j in outs or all(i in outs for i in v.items) else vals))
            elif j in slots and slots[j].constant:
                args.append(v)
            else:
                args.append(None)
                reads.append((p, j))
        targets = [bound[j].items if isinstance(bound[j], ListRef) else j for j in rets]
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

    def _init_delegate(self, index: int, d: fbp.BackendDelegate) -> tuple[Any, Any]:
        if not d.id:
            raise ProgramLoadError(f"delegate {index} of method {self.name!r} has no backend id; re-export the program")
        backend = get_backend(d.id)
        processed = self._program.delegate_data(d.processed, f"delegate {index} ({d.id}) of method {self.name!r}")
        specs = {s.key: bytes(s.value) for s in d.compile_specs}
        try:
            handle = backend.init(processed, specs, self._program.named_data)
        except EdgetorchError:
            raise
        except Exception as e:
            raise DelegateLoadError(
                f"method {self.name!r}: backend {d.id!r} could not initialise delegate {index}: {type(e).__name__}: {e}"
            ) from e
        # A backend that repacked its weights no longer needs the file's pages; ones it reads come back.
        self._program.release_pages()
        return backend, handle

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

        outputs = self.facts.delegate_outputs(pc, args)
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
        # the packed GEMM's threads and BLAS's would take each other's cores; where no kernel splits, BLAS's own
        # threads wait for each other beside a busy neighbour (blas_threads.py)
        with blas_threads.held(self.own_threads, self.blas):
            if self.tracer is not None:
                self._run_traced(self.tracer)
            else:
                self._run()

    def _run(self) -> None:
        pc, step_pcs = 0, self.step_pcs
        try:
            if self.static and self.fused is None:
                for pc, step in enumerate(self.steps):  # noqa: B007  (pc names the failing step below)
                    step()
                return
            if self.fused is not None:  # fused steps: a method with no jumps
                steps, step_pcs = self.fused
                for pc, step in enumerate(steps):  # noqa: B007  (pc names the failing step below)
                    step()
                return
            # Dynamic methods bind a step to every instruction, so a step's index is its instruction's.
            steps, n, jumps, limit = self.steps, len(self.steps), 0, self.jump_budget.limit
            while pc < n:
                nxt = steps[pc]()
                if nxt is None:
                    pc += 1
                    continue
                jumps += 1
                if jumps > limit:
                    break
                pc = nxt
        except TensorResizeError as e:
            raise self._named(e) from e
        except Exception as e:
            raise self._failed(e, step_pcs[pc] if pc < len(step_pcs) else pc) from e
        if pc < n:  # stopped at a jump past the budget
            raise self._runaway(pc, nxt)

    def _run_traced(self, tracer: Any) -> None:
        """Run the unfused steps, telling ``tracer`` about every instruction, as ExecuTorch's runtime does: an
        instruction whose work was done at load (folded, or a copy elided into a view) reports zero time."""
        if self._by_pc is None:
            by_pc = dict(zip(self.step_pcs, self.steps))
            self._by_pc = [by_pc.get(pc) for pc in range(len(self.instructions))]
        steps, n, pc, jumps, limit = self._by_pc, len(self._by_pc), 0, 0, self.jump_budget.limit
        dynamic, clock = not self.static, time.perf_counter_ns
        tracer.begin_run(self)
        start = clock()
        try:
            while pc < n:
                step = steps[pc]
                tracer.current = pc
                t0 = clock()
                if step is None:
                    tracer.instruction(self, pc, t0, t0)
                    pc += 1
                    continue
                nxt = step()  # a static kernel step returns its output: only jumps say where to go
                tracer.instruction(self, pc, t0, clock())
                if not dynamic or nxt is None:
                    pc += 1
                    continue
                jumps += 1
                if jumps > limit:
                    break
                pc = nxt
        except TensorResizeError as e:
            raise self._named(e) from e
        except Exception as e:
            raise self._failed(e, pc) from e
        if pc < n:  # stopped at a jump past the budget
            raise self._runaway(pc, nxt)
        tracer.end_run(self, start, clock())

    def _runaway(self, pc: int, dest: int) -> ExecutionError:
        """The error that stops a run whose jump from instruction ``pc`` to ``dest`` went past its jump budget."""
        message = self.jump_budget.exceeded(self.name, pc, dest)
        cause = ProgramLoadError(message)
        error = ExecutionError(message, pc, self.describe(pc))
        error.__cause__ = cause  # the code (InvalidProgram) comes from the cause: the program, not a kernel, is wrong
        return error

    def _failed(self, e: Exception, pc: int) -> ExecutionError:
        """``e``, raised by instruction ``pc``, as an ExecutionError naming the instruction."""
        what = self.describe(pc)
        return ExecutionError(
            f"method {self.name!r} failed at instruction {pc} ({what}): {type(e).__name__}: {e}"
            f"\n  the instruction: {self.listing(pc)}",
            pc,
            what,
        )

    def _named(self, e: TensorResizeError) -> TensorResizeError:
        """``e`` restated with the value whose planned slot was too small and the instruction writing it."""
        j = next((j for j, v in enumerate(self.bound) if v is e.planned), None)
        if j is None:
            return e
        writer = next((pc for pc, ins in enumerate(self.instructions) if j in self.facts.written(ins.instr_args)), None)
        at = "" if writer is None else f" at instruction {writer} ({self.describe(writer)})"
        return TensorResizeError(
            f"method {self.name!r}{at}: tensor value {j} is planned for at most {e.planned.size} elements "
            f"(upper-bound shape {list(e.planned.shape)}), but this run needs shape {list(e.shape)} "
            f"({math.prod(e.shape)} elements); re-export the program with larger dynamic-shape bounds",
            e.planned,
            e.shape,
        )

    def listing(self, pc: int) -> str:
        """Instruction ``pc`` as the program printer writes it (``%5 = aten::add.out(%1, %2, ...)  [arena ...]``)."""
        try:
            return format_instruction(self.plan, 0, pc)
        except Exception:  # a line for a message; a malformed instruction must not hide the original error
            return self.describe(pc)

    def event_name(self, pc: int) -> tuple[str, str]:
        """ExecuTorch's event tracer names for instruction ``pc``: (``OPERATOR_CALL``, ``op.overload``),
        (``DELEGATE_CALL``, backend id), or the control instruction's event name twice (``JF_CALL``, ...)."""
        a = self.instructions[pc].instr_args
        if isinstance(a, fbp.KernelCall):
            return "OPERATOR_CALL", self.operators[a.op_index]
        if isinstance(a, fbp.DelegateCall):
            return "DELEGATE_CALL", self.plan.delegates[a.delegate_index].id
        kind = _CONTROL_EVENTS.get(type(a), type(a).__name__)
        return kind, kind

    def instruction_outputs(self, pc: int) -> list[Any]:
        """The values instruction ``pc`` wrote, as they are now (views of planned memory, not copies)."""
        source = self.bound if self.static else self.vals
        values = [source[j] for j in self.facts.written(self.instructions[pc].instr_args)]
        return [v.resolve(source) if isinstance(v, ListRef) else v for v in values]

    def call_arguments(self, pc: int) -> list[Any]:
        """Every argument of delegate call ``pc`` as it is now (ExecuTorch logs them all after the call: a
        delegate call does not say which are outputs)."""
        a = self.instructions[pc].instr_args
        if not isinstance(a, fbp.DelegateCall):
            return []
        source = self.bound if self.static else self.vals
        return [v.resolve(source) if isinstance(v, ListRef) else v for v in (source[j] for j in a.args)]

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
        return [self.value(j, clone) for j in self.plan.outputs]

    def value(self, index: int, clone: bool = True) -> Any:
        """Value ``index`` as the last run left it (a tensor list as a list); tensors copied unless ``clone=False``."""
        source = self.bound if self.static else self.vals
        v = source[index]
        if isinstance(v, ListRef):
            v = v.resolve(source)
        if isinstance(v, np.ndarray):
            return np.array(v, copy=clone)
        if isinstance(v, list):
            return [np.array(t, copy=clone) if isinstance(t, np.ndarray) else t for t in v]
        return v


def _check_host_memory(plan: fbp.ExecutionPlan) -> None:
    """Refuse a method that plans some of its memory on a device: this runtime allocates host memory only."""
    for entry in plan.non_const_buffer_device or ():
        if entry.device_type != fbp.DeviceType.CPU:
            device = f"{fbp.DeviceType(entry.device_type).name}:{entry.device_index}"
            raise ProgramLoadError(
                f"method {plan.name!r} plans memory buffer {entry.buffer_idx} on device {device}; this runtime "
                "allocates host (CPU) memory only. Export the method without "
                "ExecutorchBackendConfig(enable_non_cpu_memory_planning=True), or run it on a runtime with an "
                "allocator for that device",
                code=Error.NotSupported,
            )


def _as_array(n: int, x: Any, slot: TensorSlot, method: str | None) -> np.ndarray:
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
                "re-export with a larger bound to run this size",
                code=Error.NotSupported,
            )
        if not slot.dynamic and got != want:
            raise InvalidInputError(
                f"input {n} of method {method!r} must have shape {list(slot.sizes)}, got {list(arr.shape)} "
                f"(dimension {d} is static)",
                code=Error.NotSupported,
            )
    return arr


def _scalar_input(n: int, x: Any, planned: Any, method: str | None) -> Any:
    if isinstance(planned, bool):
        kinds: tuple[type, ...] = (bool, np.bool_)
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
