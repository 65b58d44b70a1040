"""Memory planning: tensor lifetimes, the naive and greedy placement algorithms, and plan checks.

Every non-constant tensor of a method gets a ``mem_id`` (an arena; 0 is
reserved, 1 is the default) and an offset inside that arena. Lifetimes are
steps in the flattened instruction order (control-flow branches inline). Two
tensors may share bytes only when their lifetimes do not overlap. May import
torch (through the specs).
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch.export.graph_signature import ExportGraphSignature

from edgetorch.errors import EdgetorchError
from edgetorch.exir.passes.spec_prop import CONTROL_FLOW_OPS, graph_specs
from edgetorch.exir.tensor import TensorSpec, spec_leaves

DEFAULT_MEM_ID = 1


class MemoryPlanError(EdgetorchError):
    """A memory plan places two simultaneously live tensors in the same bytes, or misaligns one."""


@dataclass
class MemoryPlan:
    """The outcome of planning one method: the planned specs and the size of each arena (index = mem_id)."""

    specs: list[TensorSpec]
    bufsizes: list[int]
    alignment: int = 16
    unplanned: list[TensorSpec] = field(default_factory=list)

    def __str__(self) -> str:
        rows = [f"{'tensor':<40} {'lifetime':>12} {'mem_id':>6} {'offset':>10} {'size':>10}"]
        for s in sorted(self.specs, key=lambda s: (s.mem_id, s.mem_offset)):
            life = f"[{s.lifetime[0]}, {s.lifetime[1]}]"
            rows.append(
                f"{s.name:<40} {life:>12} {s.mem_id:>6} {s.mem_offset:>10} {s.aligned_nbytes(self.alignment):>10}"
            )
        rows.append(f"arena sizes: {self.bufsizes}; lower bound {lower_bound(self.specs, self.alignment)}")
        return "\n".join(rows)


def assign_lifetimes(gm: torch.fx.GraphModule) -> int:
    """Set ``spec.lifetime`` for every spec of ``gm`` (outputs live to the end); returns the number of steps."""
    for spec in graph_specs(gm):
        spec.lifetime = [None, None]
    end = _walk(gm, 0)
    output = gm.graph.output_node()
    for spec in spec_leaves([a.meta.get("spec") for a in output.all_input_nodes]):
        spec.lifetime[1] = end
    _tie_branch_outputs(gm)
    return end + 1


def _tie_branch_outputs(gm: torch.fx.GraphModule) -> None:
    """A cond's result is its branch's output moved in (a MoveCall moves the value, so the result then *is* the
    branch output's tensor, in the branch output's bytes): those bytes must stay live as long as the result."""
    for node in gm.graph.nodes:
        if not (node.op == "call_function" and node.target in CONTROL_FLOW_OPS):
            continue
        results = spec_leaves(node.meta.get("spec"))
        for branch in node.args[1:3]:
            sub = getattr(gm, branch.target)
            outputs = spec_leaves(
                [a.meta.get("spec") if isinstance(a, torch.fx.Node) else None for a in sub.graph.output_node().args[0]]
            )
            for result, out in zip(results, outputs):
                if result is not out and None not in (*result.lifetime, *out.lifetime):
                    out.lifetime = [out.lifetime[0], max(out.lifetime[1], result.lifetime[1])]
            _tie_branch_outputs(sub)  # after the extension: an inner cond's result may be this branch's output


def _walk(gm: torch.fx.GraphModule, step: int) -> int:
    """Mark each node's definition and uses at its step; branches of a cond take the steps inside it."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in CONTROL_FLOW_OPS:
            _touch(node, step)
            for branch in node.args[1:3]:
                step = _walk(getattr(gm, branch.target), step + 1)
        _touch(node, step)
        step += 1
    return step - 1


def _touch(node: torch.fx.Node, step: int) -> None:
    specs = spec_leaves(node.meta.get("spec")) + spec_leaves([a.meta.get("spec") for a in node.all_input_nodes])
    for spec in specs:
        start, end = spec.lifetime
        spec.lifetime = [step if start is None else min(start, step), step if end is None else max(end, step)]


def _naive_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Each tensor its own bytes, one after another: no reuse, the baseline."""
    offsets, offset = [], 0
    for spec in specs:
        offsets.append(offset)
        offset += spec.aligned_nbytes(alignment)
    return offsets


def _greedy_offsets(specs: list[TensorSpec], alignment: int, allow_overlapping_allocations: bool = True) -> list[int]:
    """The smaller of two largest-first plans: shared slots (best fit) and first-fit offsets.

    Slots never exceed the naive arena; first-fit offsets usually come closer to the
    lower bound because a tensor may straddle the spans of several shorter-lived ones.
    Without ``allow_overlapping_allocations`` only whole slots are shared.
    """
    by_slots = _slot_offsets(specs, alignment)
    if not allow_overlapping_allocations:
        return by_slots
    by_offsets = _first_fit_offsets(specs, alignment)
    return min((by_slots, by_offsets), key=lambda offsets: _arena_size(specs, offsets, alignment))


def _arena_size(specs: list[TensorSpec], offsets: list[int], alignment: int) -> int:
    return max((o + s.aligned_nbytes(alignment) for s, o in zip(specs, offsets)), default=0)


def _slot_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Best fit: largest first, each tensor joins the slot of closest size among slots whose lifetimes it avoids."""
    slots: list[_Slot] = []
    for spec in sorted(specs, key=lambda s: -s.aligned_nbytes(alignment)):
        size = spec.aligned_nbytes(alignment)
        free = [slot for slot in slots if slot.fits(spec)]
        best = min(free, key=lambda slot: abs(slot.size - size)) if free else None
        if best is None:
            best = _Slot()
            slots.append(best)
        best.add(spec, size)
    where, offset = {}, 0
    for slot in slots:
        for spec in slot.members:
            where[id(spec)] = offset
        offset += slot.size
    return [where[id(spec)] for spec in specs]


def _first_fit_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Largest first, each tensor at the lowest offset clear of every placed tensor alive at the same time."""
    placed: list[tuple[int, int, int, int]] = []  # (first step, last step, low byte, high byte)
    where: dict[int, int] = {}
    for spec in sorted(specs, key=lambda s: (-s.aligned_nbytes(alignment), s.lifetime[0])):
        size = spec.aligned_nbytes(alignment)
        start, end = spec.lifetime
        offset = 0
        for lo, hi in sorted((lo, hi) for a, b, lo, hi in placed if a <= end and start <= b):
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        placed.append((start, end, offset, offset + size))
        where[id(spec)] = offset
    return [where[id(spec)] for spec in specs]


class _Slot:
    """Tensors sharing one span of memory; their lifetimes are disjoint and kept sorted by start."""

    def __init__(self) -> None:
        self.size = 0
        self.starts: list[int] = []
        self.members: list[TensorSpec] = []

    def fits(self, spec: TensorSpec) -> bool:
        i = bisect.bisect_left(self.starts, spec.lifetime[0])
        before_ok = i == 0 or self.members[i - 1].lifetime[1] < spec.lifetime[0]
        after_ok = i == len(self.members) or self.members[i].lifetime[0] > spec.lifetime[1]
        return before_ok and after_ok

    def add(self, spec: TensorSpec, size: int) -> None:
        i = bisect.bisect_left(self.starts, spec.lifetime[0])
        self.starts.insert(i, spec.lifetime[0])
        self.members.insert(i, spec)
        self.size = max(self.size, size)


def _overlap(a: TensorSpec, b: TensorSpec) -> bool:
    return a.lifetime[0] <= b.lifetime[1] and b.lifetime[0] <= a.lifetime[1]


@dataclass
class SpecAllocResult:
    """Where one algorithm placed one tensor: arena, shared memory object, byte offset."""

    mem_id: int
    mem_obj_id: int
    mem_offset: int


@dataclass
class MemoryAlgoResult:
    """One algorithm's placement of every tensor it was given, and each arena's size (index = mem_id)."""

    spec_dict: dict[TensorSpec, SpecAllocResult]
    bufsizes: list[int]


def _place(
    offsets_of: Callable[[list[TensorSpec], int], list[int]],
    alignment: int,
    specs: Iterable[TensorSpec],
    extra_padding: int,
) -> MemoryAlgoResult:
    """Run ``offsets_of`` arena by arena (a spec's preset ``mem_id``, else 1); each used arena grows by the padding."""
    specs = list(specs)
    result = MemoryAlgoResult({}, [0] * (max((s.mem_id or DEFAULT_MEM_ID for s in specs), default=DEFAULT_MEM_ID) + 1))
    for mem_id in sorted({s.mem_id or DEFAULT_MEM_ID for s in specs}):
        group = [s for s in specs if (s.mem_id or DEFAULT_MEM_ID) == mem_id]
        offsets = offsets_of(group, alignment)
        objects: dict[int, int] = {}
        for spec, offset in zip(group, offsets):
            spec.realign(alignment)
            result.spec_dict[spec] = SpecAllocResult(mem_id, objects.setdefault(offset, len(objects)), offset)
        result.bufsizes[mem_id] = max(o + s.allocated_memory for s, o in zip(group, offsets)) + extra_padding
    return result


def naive(
    alignment: int,
    specs: Iterable[TensorSpec],
    graph_module: torch.fx.GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
) -> MemoryAlgoResult:
    """Give each tensor its own bytes: no reuse, the baseline (ExecuTorch's algorithm signature)."""
    return _place(_naive_offsets, alignment, specs, extra_padding)


def greedy(
    alignment: int,
    specs: Iterable[TensorSpec],
    graph_module: torch.fx.GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
    *,
    allow_overlapping_allocations: bool = True,
) -> MemoryAlgoResult:
    """Reuse the bytes of dead tensors, largest tensors first (ExecuTorch's algorithm signature).

    With ``allow_overlapping_allocations=False`` tensors share only whole slots, never part of one.
    """
    return _place(
        lambda group, align: _greedy_offsets(group, align, allow_overlapping_allocations),
        alignment,
        specs,
        extra_padding,
    )


class MemoryPlanningAlgorithmSuite:
    """Run several planning algorithms and keep the placement with the smallest total size.

    Each algorithm has ExecuTorch's signature ``algo(alignment, specs, graph_module,
    graph_signature, extra_padding) -> MemoryAlgoResult``; the suite itself is what
    ``MemoryPlanningPass`` calls, and returns the arena sizes.
    """

    def __init__(self, algo_list: list[Callable[..., MemoryAlgoResult]] | None = None) -> None:
        self.algo_list = [greedy] if algo_list is None else list(algo_list)
        if not self.algo_list:
            raise ValueError("MemoryPlanningAlgorithmSuite needs at least one algorithm; found an empty algo_list")

    def __call__(
        self,
        alignment: int,
        specs: Iterable[TensorSpec],
        graph_module: torch.fx.GraphModule | None,
        graph_signature: ExportGraphSignature | None,
        extra_padding: int = 0,
    ) -> list[int]:
        specs = list(specs)
        results = []
        for algo in self.algo_list:
            result = algo(alignment, specs, graph_module, graph_signature, extra_padding)
            if not isinstance(result, MemoryAlgoResult):
                raise MemoryPlanError(
                    f"memory planning algorithm {_name(algo)} returned {type(result).__name__}; expected a "
                    "MemoryAlgoResult(spec_dict, bufsizes)"
                )
            results.append(result)
        best = min(results, key=lambda r: sum(r.bufsizes))
        return apply_result(best)


def apply_result(result: MemoryAlgoResult) -> list[int]:
    """Write ``result``'s placements into its specs; returns its arena sizes."""
    for spec, where in result.spec_dict.items():
        spec.mem_id, spec.mem_obj_id, spec.mem_offset = where.mem_id, where.mem_obj_id, where.mem_offset
    return list(result.bufsizes)


def run_algorithm(
    algo: Callable[..., MemoryAlgoResult | list[int]],
    alignment: int,
    specs: list[TensorSpec],
    graph_module: torch.fx.GraphModule | None = None,
    graph_signature: ExportGraphSignature | None = None,
    extra_padding: int = 0,
) -> list[int]:
    """Plan ``specs`` with ``algo`` (an algorithm or a suite); returns the arena sizes, every spec placed.

    Raises MemoryPlanError when the algorithm leaves a tensor without a place or an arena too small for it.
    """
    answer = algo(alignment, specs, graph_module, graph_signature, extra_padding)
    if isinstance(answer, MemoryAlgoResult):
        bufsizes = apply_result(answer)
    elif isinstance(answer, (list, tuple)) and all(isinstance(size, int) for size in answer):
        bufsizes = list(answer)
    else:
        raise MemoryPlanError(
            f"memory planning algorithm {_name(algo)} returned {type(answer).__name__}; expected a "
            "MemoryAlgoResult or a list of arena sizes"
        )
    for spec in specs:
        if spec.mem_id is None or spec.mem_offset is None:
            raise MemoryPlanError(
                f"memory planning algorithm {_name(algo)} left {spec.name or spec} without a place "
                f"(mem_id={spec.mem_id}, mem_offset={spec.mem_offset}); it must place every spec it is given"
            )
        if spec.mem_id >= len(bufsizes) or spec.mem_offset + spec.aligned_nbytes(alignment) > bufsizes[spec.mem_id]:
            raise MemoryPlanError(
                f"memory planning algorithm {_name(algo)} put {spec.name or spec} at arena {spec.mem_id} offset "
                f"{spec.mem_offset}, beyond the arena sizes it returned ({bufsizes})"
            )
    return bufsizes + [0] * (2 - len(bufsizes))


def _name(algo: Callable[..., object]) -> str:
    inner = getattr(algo, "func", algo)
    return getattr(inner, "__name__", type(inner).__name__)


ALGORITHMS: dict[str, Callable[..., MemoryAlgoResult]] = {"naive": naive, "greedy": greedy}


def lower_bound(specs: Iterable[TensorSpec], alignment: int = 16) -> int:
    """The most bytes live at any one step: no plan of one arena can be smaller."""
    events = sorted(
        [(s.lifetime[0], s.aligned_nbytes(alignment)) for s in specs]
        + [(s.lifetime[1] + 1, -s.aligned_nbytes(alignment)) for s in specs],
        key=operator.itemgetter(0, 1),
    )
    live = peak = 0
    for _, delta in events:
        live += delta
        peak = max(peak, live)
    return peak


def verify_plan(memory_plan: MemoryPlan) -> None:
    """Raise MemoryPlanError if two live-at-once tensors share bytes, or a tensor is misaligned or out of its arena."""
    specs, alignment = memory_plan.specs, memory_plan.alignment
    for spec in specs:
        end = spec.mem_offset + spec.aligned_nbytes(alignment)
        if spec.mem_offset % alignment or end > memory_plan.bufsizes[spec.mem_id]:
            raise MemoryPlanError(
                f"{spec.name} spans {spec.mem_offset}..{end} of arena {spec.mem_id} "
                f"(size {memory_plan.bufsizes[spec.mem_id]}); expected a {alignment}-aligned span inside the arena"
            )
    ordered = sorted(specs, key=lambda s: (s.mem_id, s.mem_offset))
    for i, a in enumerate(ordered):
        a_end = a.mem_offset + a.aligned_nbytes(alignment)
        for b in ordered[i + 1 :]:
            if b.mem_id != a.mem_id or b.mem_offset >= a_end:
                break
            if _overlap(a, b) and a.nbytes and b.nbytes:
                raise MemoryPlanError(
                    f"{a.name} (lifetime {a.lifetime}, bytes {a.mem_offset}..{a_end}) and {b.name} "
                    f"(lifetime {b.lifetime}, offset {b.mem_offset}) are live together but share memory"
                )
