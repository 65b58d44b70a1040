"""Load-time facts about a method's plan that the executor binds its steps from.

Which values an instruction writes and reads (def-use), where a planned tensor lives and whether two planned
byte ranges overlap, which computed tensors a static view reads through (their results must keep landing in
planned memory), and which arguments of a delegate call are its outputs. The load-time rewrites (copy elision,
the fusions) ask these questions here rather than keeping analyses of their own. Pure functions of the plan and
the values made from it; nothing here runs a kernel. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import cached_property
from typing import Any

from edgetorch.errors import ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.runtime.kernels.registry import lookup
from edgetorch.runtime.values import ListRef, TensorSlot


def op_key(op: fbp.Operator) -> str:
    """``namespace::op.overload``, the name kernels are registered under."""
    if not op.name:
        raise ProgramLoadError(f"operator {op} has no name; the program is malformed, re-export it")
    return f"{op.name}.{op.overload}" if op.overload else op.name


Range = tuple[int, int, int]  # (memory id, first byte, end byte) of planned memory


def overlaps(r: Range | None, memory: Range) -> bool:
    """Whether the planned bytes ``r`` (None: not planned) share a byte with ``memory``."""
    return r is not None and r[0] == memory[0] and r[1] < memory[2] and memory[1] < r[2]


def kernel_results(fn: Callable, args: Sequence[int], nargs: int) -> list[int]:
    """The values a KernelCall writes: those after the kernel's arguments, or the argument it resizes in place
    (``et_copy_index`` grows its accumulator and has no result value)."""
    resized = getattr(fn, "resizes_arg", None)
    if len(args) == nargs and resized is not None and resized < nargs:
        return [args[resized]]
    return list(args[nargs:])


def last_reads(reads: Iterable[Iterable[int]]) -> dict[int, int]:
    """Each value and the index of the last step that reads it, for steps given in order by the values each
    reads: a method's instructions (:attr:`PlanFacts.last_read`) or an XNNPACK graph's nodes, whose runtime
    gives a buffer back to its pool after that step (backends/xnnpack/runtime/memory.py)."""
    return {v: i for i, step in enumerate(reads) for v in step}


class PlanFacts:
    """Questions about one plan, answered from its values as the executor made them (``bound``, ``slots``)."""

    def __init__(
        self, plan: fbp.ExecutionPlan, instructions: Sequence[Any], slots: dict[int, TensorSlot], bound: list[Any]
    ):
        self.plan = plan
        self.instructions = instructions
        self.slots = slots
        self.bound = bound

    def items(self, indices: Any) -> list[int]:
        """Value indices with every list value replaced by the values it holds; out-of-range ones are left out
        (binding reports them)."""
        n, found = len(self.bound), list[int]()
        for j in indices:
            if 0 <= j < n:
                v = self.bound[j]
                found.extend((i for i in v.items if 0 <= i < n) if isinstance(v, ListRef) else (j,))
        return found

    def written(self, a: Any) -> list[int]:
        """The values an instruction writes: a kernel's results, every argument of a delegate."""
        if isinstance(a, fbp.KernelCall) and 0 <= a.op_index < len(self.plan.operators):
            fn, nargs = lookup(op_key(self.plan.operators[a.op_index]))
            return self.items(kernel_results(fn, a.args, nargs))
        return self.items(a.args) if isinstance(a, fbp.DelegateCall) else []

    @cached_property
    def writes(self) -> list[list[int]]:
        """The values each instruction writes, by instruction index."""
        return [self.written(ins.instr_args) for ins in self.instructions]

    @cached_property
    def writers(self) -> dict[int, set[int]]:
        """Each written value and the instructions that write it."""
        found: dict[int, set[int]] = {}
        for pc, values in enumerate(self.writes):
            for j in values:
                found.setdefault(j, set()).add(pc)
        return found

    @cached_property
    def readers(self) -> dict[int, set[int]]:
        """Each value and the instructions that name it among their arguments (a kernel's out arguments
        included)."""
        found: dict[int, set[int]] = {}
        for pc, ins in enumerate(self.instructions):
            for j in self.items(getattr(ins.instr_args, "args", ())):
                found.setdefault(j, set()).add(pc)
        return found

    @cached_property
    def last_read(self) -> dict[int, int]:
        """Each value and the last instruction that names it among its arguments."""
        return last_reads(self.items(getattr(ins.instr_args, "args", ())) for ins in self.instructions)

    def planned_range(self, j: int) -> Range | None:
        """(memory id, first byte, end byte) of a planned tensor, or None."""
        t = self.plan.values[j].val
        if not isinstance(t, fbp.Tensor) or t.allocation_info is None:
            return None
        a, nbytes = t.allocation_info, self.bound[j].nbytes
        return a.memory_id, a.memory_offset, a.memory_offset + nbytes

    def written_over(
        self,
        memory: Range | None,
        first: int,
        last: int,
        ranges: Callable[[int], Range | None],
        value: int | None = None,
    ) -> bool:
        """Whether an instruction from ``first`` to ``last`` (inclusive) writes a value whose bytes (as
        ``ranges`` gives them) overlap ``memory`` (None: bytes no plan places), or writes ``value`` itself. The
        question copy elision asks, for static methods (copy_elision.py) and dynamic ones (fusion.py), before a
        view may read ``value``'s memory in place of a copy until ``last``."""
        return any(
            w == value or (memory is not None and overlaps(ranges(w), memory))
            for pc in range(first, last + 1)
            for w in self.writes[pc]
        )

    def view_bases(self) -> set[int]:
        """Computed tensors whose planned memory a view reads: their results must keep landing in that memory."""
        return set().union(*self.view_map().values())

    def view_map(self) -> dict[int, set[int]]:
        """Each static view (a tensor no instruction writes, read by some instruction or output) and the computed
        tensors whose planned memory it reads.

        ExecuTorch emits a static ``view`` as a second tensor planned over its base's bytes, with no
        instruction. Its base is the last result overlapping those bytes before the view's first reader (the
        plan keeps the base alive while the view is read, so nothing else writes there in between).
        """
        writes = self.writes
        written = set(self.plan.inputs).union(*writes)
        views = {}
        for j, slot in self.slots.items():
            r = None if j in written or slot.constant else self.planned_range(j)
            if r is not None and r[1] < r[2]:
                views[j] = r
        ranges = [[(j, self.planned_range(j)) for j in w] for w in writes]
        readers = [self.items(getattr(ins.instr_args, "args", ())) for ins in self.instructions]
        bases: dict[int, set[int]] = {}
        for pc, reads in enumerate([*readers, list(self.plan.outputs)]):
            for v in views.keys() & set(reads):
                mem_id, lo, hi = views.pop(v)
                for before in reversed(ranges[:pc]):
                    hits = [j for j, r in before if r and r[0] == mem_id and r[1] < hi and lo < r[2]]
                    if hits:
                        bases[v] = set(hits)
                        break
        return bases

    def delegate_outputs(self, pc: int, args: list[int]) -> set[int]:
        """The dynamic-shape tensors among a delegate call's arguments that the delegate writes.

        A DelegateCall lists inputs then outputs without saying where one ends. An output here is a planned,
        dynamic tensor that is no method input, no kernel's result, no move's destination and no argument of an
        earlier delegate call:
        nothing but this call produces it, so it must get its planned slot (at the upper bound) to resize.
        """
        produced = set(self.plan.inputs)
        for before, ins in enumerate(self.instructions):
            a = ins.instr_args
            if isinstance(a, fbp.KernelCall) or (isinstance(a, fbp.DelegateCall) and before < pc):
                produced.update(self.written(a))
            elif isinstance(a, fbp.MoveCall):  # a torch.cond's result: the branch output moved in, already sized
                produced.add(a.move_to)
        slots = self.slots
        return {j for j in args if j in slots and slots[j].dynamic and not slots[j].constant and j not in produced}
