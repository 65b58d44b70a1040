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

from edgetorch.errors import EdgetorchError
from edgetorch.exir.passes.spec_prop import CONTROL_FLOW_OPS, graph_specs
from edgetorch.exir.tensor import TensorSpec, spec_leaves

DEFAULT_MEM_ID = 1
Algorithm = Callable[[list[TensorSpec], int], None]


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
                f"{s.name:<40} {life:>12} {s.mem_id:>6} {s.mem_offset:>10} {s.allocated_memory(self.alignment):>10}"
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
    return end + 1


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


def naive(specs: list[TensorSpec], alignment: int) -> None:
    """Give each tensor its own bytes, one after another: no reuse, the baseline."""
    offset = 0
    for spec in specs:
        spec.mem_offset = offset
        offset += spec.allocated_memory(alignment)


def greedy(specs: list[TensorSpec], alignment: int) -> None:
    """The smaller of two largest-first plans: shared slots (best fit) and first-fit offsets.

    Slots never exceed the naive arena; first-fit offsets usually come closer to the
    lower bound because a tensor may straddle the spans of several shorter-lived ones.
    """
    by_slots = _slot_offsets(specs, alignment)
    by_offsets = _first_fit_offsets(specs, alignment)
    chosen = min((by_slots, by_offsets), key=lambda offsets: _arena_size(specs, offsets, alignment))
    for spec, offset in zip(specs, chosen):
        spec.mem_offset = offset


def _arena_size(specs: list[TensorSpec], offsets: list[int], alignment: int) -> int:
    return max((o + s.allocated_memory(alignment) for s, o in zip(specs, offsets)), default=0)


def _slot_offsets(specs: list[TensorSpec], alignment: int) -> list[int]:
    """Best fit: largest first, each tensor joins the slot of closest size among slots whose lifetimes it avoids."""
    slots: list[_Slot] = []
    for spec in sorted(specs, key=lambda s: -s.allocated_memory(alignment)):
        size = spec.allocated_memory(alignment)
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
    for spec in sorted(specs, key=lambda s: (-s.allocated_memory(alignment), s.lifetime[0])):
        size = spec.allocated_memory(alignment)
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


ALGORITHMS: dict[str, Algorithm] = {"naive": naive, "greedy": greedy}


def _overlap(a: TensorSpec, b: TensorSpec) -> bool:
    return a.lifetime[0] <= b.lifetime[1] and b.lifetime[0] <= a.lifetime[1]


def plan(specs: list[TensorSpec], algorithm: Algorithm, alignment: int = 16) -> list[int]:
    """Place ``specs`` arena by arena (grouped by ``mem_id``, default 1); returns the arena sizes by mem_id."""
    for spec in specs:
        if spec.mem_id is None:
            spec.mem_id = DEFAULT_MEM_ID
    bufsizes = [0] * (max((s.mem_id for s in specs), default=DEFAULT_MEM_ID) + 1)
    for mem_id in sorted({s.mem_id for s in specs}):
        group = [s for s in specs if s.mem_id == mem_id]
        algorithm(group, alignment)
        bufsizes[mem_id] = max(s.mem_offset + s.allocated_memory(alignment) for s in group)
    return bufsizes


def lower_bound(specs: Iterable[TensorSpec], alignment: int = 16) -> int:
    """The most bytes live at any one step: no plan of one arena can be smaller."""
    events = sorted(
        [(s.lifetime[0], s.allocated_memory(alignment)) for s in specs]
        + [(s.lifetime[1] + 1, -s.allocated_memory(alignment)) for s in specs],
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
        end = spec.mem_offset + spec.allocated_memory(alignment)
        if spec.mem_offset % alignment or end > memory_plan.bufsizes[spec.mem_id]:
            raise MemoryPlanError(
                f"{spec.name} spans {spec.mem_offset}..{end} of arena {spec.mem_id} "
                f"(size {memory_plan.bufsizes[spec.mem_id]}); expected a {alignment}-aligned span inside the arena"
            )
    ordered = sorted(specs, key=lambda s: (s.mem_id, s.mem_offset))
    for i, a in enumerate(ordered):
        a_end = a.mem_offset + a.allocated_memory(alignment)
        for b in ordered[i + 1 :]:
            if b.mem_id != a.mem_id or b.mem_offset >= a_end:
                break
            if _overlap(a, b) and a.nbytes and b.nbytes:
                raise MemoryPlanError(
                    f"{a.name} (lifetime {a.lifetime}, bytes {a.mem_offset}..{a_end}) and {b.name} "
                    f"(lifetime {b.lifetime}, offset {b.mem_offset}) are live together but share memory"
                )
