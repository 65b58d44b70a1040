"""``Verification.InternalConsistency``: every reference inside a program checked before any method loads.

Both verification levels decode the whole flatbuffer with every offset, length
and union tag bounds-checked (a hostile file cannot make the decoder read out of
bounds), and every method checks what it binds when it is loaded. With
``InternalConsistency`` the runtime also checks, at ``load_program`` and for every
method, that what the program's parts say about each other holds: value,
operator, delegate and segment indices in range, list items of the right kind,
jump targets inside their chain, dim orders that are permutations, and each
tensor's bytes inside its planned buffer, constant segment or mutable segment.
A violation is a ProgramLoadError naming the method and the part. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from edgetorch.errors import ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.format.pte import FormatError, PteFile
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY

# How many violations one error message lists; the count of the rest follows.
_SHOWN = 5


def check_internal_consistency(pte: PteFile) -> None:
    """Raise ProgramLoadError listing what in ``pte`` refers to something that is not there."""
    problems = list(_program_problems(pte))
    if problems:
        more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
        raise ProgramLoadError(
            "the program is not internally consistent; the file is corrupt or was written by a broken tool: "
            + "; ".join(problems[:_SHOWN])
            + more
        )


def _program_problems(pte: PteFile) -> Iterator[str]:
    program = pte.program
    sizes: list[int | None] = []
    for i in range(len(program.segments)):
        try:
            sizes.append(len(pte.segment(i)))
        except FormatError as e:
            sizes.append(None)
            yield str(e)
    context = _Context(program, sizes)
    cs = program.constant_segment
    if cs is not None and len(cs.offsets) > 1:
        yield from context.subsegments("constant segment", cs)
    for k, sub in enumerate(program.mutable_data_segments or []):
        yield from context.subsegments(f"mutable data segment {k}", sub)
    for nd in program.named_data or []:
        if not 0 <= nd.segment_index < len(sizes):
            yield f"named data {nd.key!r} is in segment {nd.segment_index}, but the file has {len(sizes)} segments"
    names = [plan.name for plan in program.execution_plan]
    for name in sorted({n for n in names if names.count(n) > 1}, key=str):
        yield f"method name {name!r} is used by {names.count(name)} methods"
    for plan in program.execution_plan:
        yield from (f"method {plan.name!r}: {p}" for p in context.plan_problems(plan))


class _Context:
    """What a method's references are checked against: the program's segments, constants and inline blobs."""

    def __init__(self, program: fbp.Program, segment_sizes: list[int | None]):
        self.program = program
        self.segment_sizes = segment_sizes

    def subsegments(self, what: str, sub: fbp.SubsegmentOffsets) -> Iterator[str]:
        if not 0 <= sub.segment_index < len(self.segment_sizes):
            yield f"the {what} is segment {sub.segment_index}, but the file has {len(self.segment_sizes)} segments"
            return
        size = self.segment_sizes[sub.segment_index]
        if size is not None and any(off > size for off in sub.offsets):
            yield f"the {what} has offsets past its {size} bytes: {[o for o in sub.offsets if o > size][:3]}"

    def _subsegment_room(self, sub: fbp.SubsegmentOffsets | None, index: int) -> int | None:
        """Bytes available from buffer ``index`` of ``sub`` to the end of its segment; None if unknown."""
        if sub is None or not 0 <= index < len(sub.offsets) or not 0 <= sub.segment_index < len(self.segment_sizes):
            return None
        size = self.segment_sizes[sub.segment_index]
        return None if size is None else size - sub.offsets[index]

    def plan_problems(self, plan: fbp.ExecutionPlan) -> Iterator[str]:
        values, n = plan.values, len(plan.values)
        kinds = [type(ev.val) for ev in values]

        def bad(i: int) -> bool:
            return not 0 <= i < n

        arenas = [int(s) for s in plan.non_const_buffer_sizes]
        if any(s < 0 for s in arenas):
            yield f"planned buffer sizes {arenas} include a negative size"
        for entry in plan.non_const_buffer_device or ():
            if not 0 < entry.buffer_idx < len(arenas):
                yield f"a device entry names planned buffer {entry.buffer_idx}, but the method has buffers 1..{len(arenas) - 1}"
        for what, indices in (("input", plan.inputs), ("output", plan.outputs)):
            for i in indices:
                if bad(i):
                    yield f"{what} refers to value {i}, but the method has {n} values"
        for i, ev in enumerate(values):
            v = ev.val
            if isinstance(v, fbp.IntList):
                wrong = [j for j in v.items if bad(j) or kinds[j] is not fbp.Int]
                if wrong:
                    yield f"int list value {i} holds {wrong[:3]}, which are not Int values (of {n})"
            elif isinstance(v, fbp.TensorList):
                wrong = [j for j in v.items if bad(j) or kinds[j] is not fbp.Tensor]
                if wrong:
                    yield f"tensor list value {i} holds {wrong[:3]}, which are not Tensor values (of {n})"
            elif isinstance(v, fbp.OptionalTensorList):
                wrong = [j for j in v.items if j != -1 and (bad(j) or kinds[j] not in (fbp.Tensor, fbp.Null))]
                if wrong:
                    yield f"optional tensor list value {i} holds {wrong[:3]}, which are not Tensor or None values"
            elif isinstance(v, fbp.Tensor):
                yield from (f"tensor value {i}: {p}" for p in self._tensor_problems(v, arenas))
        for c, chain in enumerate(plan.chains):
            for what, indices in (("inputs", chain.inputs), ("outputs", chain.outputs)):
                if any(bad(i) for i in indices):
                    yield f"chain {c} {what} {list(indices)} refer to values outside 0..{n - 1}"
            count = len(chain.instructions)
            for pc, ins in enumerate(chain.instructions):
                yield from (f"chain {c} instruction {pc}: {p}" for p in self._instruction_problems(ins, plan, count))
        for k, op in enumerate(plan.operators):
            if not op.name:
                yield f"operator {k} has no name"
        for k, d in enumerate(plan.delegates):
            yield from (f"delegate {k} ({d.id}): {p}" for p in self._delegate_problems(d))

    def _instruction_problems(self, ins: fbp.Instruction, plan: fbp.ExecutionPlan, count: int) -> Iterator[str]:
        a, n = ins.instr_args, len(plan.values)
        if isinstance(a, fbp.KernelCall):
            if not 0 <= a.op_index < len(plan.operators):
                yield f"calls operator {a.op_index}, but the method has {len(plan.operators)} operators"
            refs = list(a.args)
        elif isinstance(a, fbp.DelegateCall):
            if not 0 <= a.delegate_index < len(plan.delegates):
                yield f"calls delegate {a.delegate_index}, but the method has {len(plan.delegates)} delegates"
            refs = list(a.args)
        elif isinstance(a, fbp.MoveCall):
            refs = [a.move_from, a.move_to]
        elif isinstance(a, fbp.JumpFalseCall):
            if not 0 <= a.destination_instruction <= count:
                yield f"jumps to instruction {a.destination_instruction}, outside 0..{count}"
            refs = [a.cond_value_index]
        elif isinstance(a, fbp.FreeCall):
            refs = [a.value_index]
        else:
            yield f"has no known instruction kind ({type(a).__name__})"
            return
        wrong = [j for j in refs if not 0 <= j < n]
        if wrong:
            yield f"refers to values {wrong[:3]}, but the method has {n} values"

    def _tensor_problems(self, t: fbp.Tensor, arenas: list[int]) -> Iterator[str]:
        dtype = SCALAR_TO_NUMPY.get(t.scalar_type)
        if dtype is None:
            yield f"scalar type {t.scalar_type!r} is not one this runtime knows"
            return
        sizes = [int(s) for s in t.sizes]
        if any(s < 0 for s in sizes):
            yield f"sizes {sizes} include a negative size"
            return
        order = list(t.dim_order)
        if order and sorted(order) != list(range(len(sizes))):
            yield f"dim order {order} is not a permutation of 0..{len(sizes) - 1}"
        nbytes = math.prod(sizes) * dtype.itemsize
        info = t.extra_tensor_info
        if t.allocation_info is not None:
            a = t.allocation_info
            if not 0 < a.memory_id < len(arenas):
                yield f"is planned in memory id {a.memory_id}, but the method plans ids 1..{len(arenas) - 1}"
            elif a.memory_offset + nbytes > arenas[a.memory_id]:
                yield (
                    f"needs bytes {a.memory_offset}..{a.memory_offset + nbytes} of planned buffer {a.memory_id}, "
                    f"which has {arenas[a.memory_id]}"
                )
            external = info is not None and info.location == fbp.TensorDataLocation.EXTERNAL
            # A planned tensor kept in a .ptd (trainable weights written with external_constants) takes
            # its initial state from the data file by name; its data_buffer_idx points into no segment.
            if t.data_buffer_idx > 0 and not external:
                segs = self.program.mutable_data_segments or []
                k = info.mutable_data_segments_idx if info is not None else 0
                room = self._subsegment_room(segs[k] if k < len(segs) else None, t.data_buffer_idx)
                if room is None:
                    yield f"has initial state {t.data_buffer_idx} in mutable data segment {k}, which does not exist"
                elif nbytes > room:
                    yield f"needs {nbytes} bytes of initial state but mutable data segment {k} has {room} from there"
        elif info is not None and info.location == fbp.TensorDataLocation.EXTERNAL:
            if not info.fully_qualified_name:
                yield "keeps its data outside the program but has no name to find it by"
        elif t.data_buffer_idx > 0:
            yield from self._constant_problems(t.data_buffer_idx, nbytes)

    def _constant_problems(self, index: int, nbytes: int) -> Iterator[str]:
        program = self.program
        if program.constant_buffer:
            if index >= len(program.constant_buffer):
                yield f"uses constant buffer {index}, but the program has {len(program.constant_buffer)}"
            elif nbytes > len(program.constant_buffer[index].storage):
                yield f"needs {nbytes} bytes but constant buffer {index} has {len(program.constant_buffer[index].storage)}"
            return
        cs = program.constant_segment
        room = self._subsegment_room(cs, index)
        if room is None:
            found = 0 if cs is None else len(cs.offsets)
            yield f"uses constant {index}, but the program has {found} constant offsets (or no constant segment)"
        elif nbytes > room:
            yield f"needs {nbytes} bytes from constant {index}, but the constant segment has {room} from there"

    def _delegate_problems(self, d: fbp.BackendDelegate) -> Iterator[str]:
        if not d.id:
            yield "has no backend id"
        ref = d.processed
        if ref is None:
            yield "has no processed data"
        elif ref.location == fbp.DataLocation.INLINE:
            if ref.index >= len(self.program.backend_delegate_data):
                yield f"uses inline data {ref.index}, but the program has {len(self.program.backend_delegate_data)}"
        elif ref.index >= len(self.segment_sizes):
            yield f"uses segment {ref.index}, but the file has {len(self.segment_sizes)} segments"
