"""Banked memory planning: plan a method's tensors across a target's memory banks, each with a capacity.

A :class:`TargetMemoryMap` lists the banks (arenas with a byte budget) fastest
first. :class:`BankedGreedy` offers tensors largest first to the banks in that
order; a bank takes a tensor at the lowest offset clear of its live tensors when
that stays inside its budget, else the tensor spills to the next bank. A tensor
fitting nowhere is a :class:`BankPlacementError` at export time. Specs already
carrying a ``mem_id`` (set by a custom pool pass) are pins: placed first in their
own bank, with no fallback. Each bank's final layout is the greedy planner's
layout of the tensors it holds whenever that fits, so a single bank plans exactly
as :func:`edgetorch.exir.memory_planning.greedy`. May import torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch.export.graph_signature import ExportGraphSignature

from edgetorch.errors import EdgetorchError
from edgetorch.exir.memory_planning import (
    DEFAULT_MEM_ID,
    MemoryAlgoResult,
    MemoryPlanningAlgorithmSuite,
    SpecAllocResult,
    _arena_size,
    _greedy_offsets,
    _shared_objects,
    _storage_root,
    get_node_tensor_specs,
)
from edgetorch.exir.passes.memory_planning_pass import MemoryPlanningPass
from edgetorch.exir.tensor import TensorSpec

ALIGNMENT = 16


@dataclass(frozen=True)
class Bank:
    """One memory region: its name, its byte budget for this model, its runtime arena id, and optionally a
    stricter alignment (a multiple of the graph's; None keeps the graph's)."""

    name: str
    size: int
    mem_id: int
    alignment: int | None = None


class TargetMemoryMap:
    """The banks the planner may fill, in preference order (fastest first); ``mem_id`` names each arena.

    An arena not declared here is never filled by the planner on its own, but
    specs pinned to it are still laid out there (without a budget).
    """

    def __init__(self, banks: Sequence[Bank]) -> None:
        if not banks:
            raise ValueError("a target memory map needs at least one Bank; found none")
        for attr in ("name", "mem_id"):
            values = [getattr(bank, attr) for bank in banks]
            repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
            if repeated:
                raise ValueError(f"bank {attr}s must be unique in a target memory map; found duplicates {repeated}")
        for bank in banks:
            if bank.size <= 0:
                raise ValueError(f"bank {bank.name} has size {bank.size}; expected a positive number of bytes")
            if bank.alignment is not None and bank.alignment < 1:
                raise ValueError(f"bank {bank.name} has alignment {bank.alignment}; expected a positive alignment")
            if bank.mem_id < 1:
                raise ValueError(
                    f"bank {bank.name} has mem_id {bank.mem_id}; arena 0 holds constants, planned banks start at 1"
                )
        self.banks: list[Bank] = list(banks)
        self._by_id = {bank.mem_id: bank for bank in self.banks}

    def mem_ids(self) -> list[int]:
        """The declared arena ids, fastest first."""
        return [bank.mem_id for bank in self.banks]

    def manages(self, mem_id: int) -> bool:
        return mem_id in self._by_id

    def bank(self, mem_id: int) -> Bank:
        if mem_id not in self._by_id:
            raise ValueError(f"mem_id {mem_id} is not a bank of this map; declared: {self.mem_ids()}")
        return self._by_id[mem_id]

    def mem_id(self, name: str) -> int:
        for bank in self.banks:
            if bank.name == name:
                return bank.mem_id
        raise ValueError(f"no bank named {name!r}; declared: {[b.name for b in self.banks]}")

    def describe(self) -> str:
        return ", ".join(f"{b.name}(mem_id={b.mem_id}, size={b.size})" for b in self.banks)


class BankPlacementError(EdgetorchError):
    """The banks of a target memory map cannot hold the tensors the graph needs planned."""


class _BankState:
    """Tensors placed in one arena so far, with their offsets (largest first) and the bytes reserved before them."""

    def __init__(self, reserved: int) -> None:
        self.specs: list[TensorSpec] = []
        self.offsets: list[int] = []
        self.reserved = reserved

    def first_fit(self, spec: TensorSpec) -> int:
        """The lowest offset clear of every placed tensor live together with ``spec``."""
        size, (start, end) = spec.allocated_memory, spec.lifetime
        spans = sorted(
            (o, o + s.allocated_memory)
            for s, o in zip(self.specs, self.offsets)
            if s.lifetime[0] <= end and start <= s.lifetime[1]
        )
        offset = 0
        for lo, hi in spans:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        return offset

    def end(self) -> int:
        return max((o + s.allocated_memory for s, o in zip(self.specs, self.offsets)), default=0)

    def add(self, spec: TensorSpec, offset: int) -> None:
        self.specs.append(spec)
        self.offsets.append(offset)


class BankedGreedy:
    """The banked planning algorithm, with ExecuTorch's algorithm signature (use it inside a suite)."""

    def __init__(self, target: TargetMemoryMap, allow_overlapping_allocations: bool = True) -> None:
        self.target = target
        self.allow_overlapping_allocations = allow_overlapping_allocations
        self.__name__ = "banked_greedy"

    def __call__(
        self,
        alignment: int,
        specs: Iterable[TensorSpec],
        graph_module: torch.fx.GraphModule | None = None,
        graph_signature: ExportGraphSignature | None = None,
        extra_padding: int = 0,
    ) -> MemoryAlgoResult:
        for bank in self.target.banks:
            if bank.alignment is not None and bank.alignment % alignment:
                raise BankPlacementError(
                    f"bank {bank.name} has alignment {bank.alignment}, not a multiple of the graph's alignment "
                    f"{alignment}; declare a multiple of {alignment} (a bank may only tighten alignment)"
                )
        given = list(specs)
        _reject_non_cpu(given)
        backed = [s for s in given if s.storage_base is not None]
        roots = [s for s in given if s.storage_base is None]
        for spec in backed:
            root = _storage_root(spec)[0]
            if all(root is not s for s in roots):
                roots.append(root)
        banks: dict[int, _BankState] = {m: _BankState(_reserved(graph_module, m)) for m in self.target.mem_ids()}
        order = sorted(range(len(roots)), key=lambda i: (-roots[i].allocated_memory, roots[i].lifetime[0], i))
        pinned = [roots[i] for i in order if roots[i].mem_id is not None]
        free = [roots[i] for i in order if roots[i].mem_id is None]
        for spec in pinned:
            self._place_pin(spec, banks, alignment, extra_padding)
        for spec in free:
            self._place_free(spec, banks, alignment, extra_padding)
        return self._result(banks, backed, alignment, extra_padding)

    def _alignment(self, mem_id: int, default: int) -> int:
        return (self.target.bank(mem_id).alignment or default) if self.target.manages(mem_id) else default

    def _fits(self, mem_id: int, state: _BankState, spec: TensorSpec, offset: int, extra_padding: int) -> bool:
        if not self.target.manages(mem_id):
            return True
        end = max(state.end(), offset + spec.allocated_memory)
        return state.reserved + end + extra_padding <= self.target.bank(mem_id).size

    def _offset(self, state: _BankState, spec: TensorSpec) -> int:
        if self.allow_overlapping_allocations:
            return state.first_fit(spec)
        return _free_slot(state, spec)

    def _place_pin(self, spec: TensorSpec, banks: dict[int, _BankState], alignment: int, padding: int) -> None:
        mem_id = spec.mem_id
        state = banks.setdefault(mem_id, _BankState(0))
        spec.realign(self._alignment(mem_id, alignment))
        offset = self._offset(state, spec)
        if not self._fits(mem_id, state, spec, offset, padding):
            bank = self.target.bank(mem_id)
            raise BankPlacementError(
                f"a {spec.allocated_memory}-byte tensor (shape {list(spec.shape)}) is pinned to bank {bank.name} "
                f"(mem_id={mem_id}) but would end at byte {state.reserved + offset + spec.allocated_memory + padding} "
                f"of its {bank.size}; a pinned tensor has no fallback bank: enlarge the bank or pin it elsewhere"
            )
        state.add(spec, offset)

    def _place_free(self, spec: TensorSpec, banks: dict[int, _BankState], alignment: int, padding: int) -> None:
        for mem_id in self.target.mem_ids():
            state = banks[mem_id]
            spec.realign(self._alignment(mem_id, alignment))
            offset = self._offset(state, spec)
            if self._fits(mem_id, state, spec, offset, padding):
                spec.mem_id = None
                state.add(spec, offset)
                return
        left = ", ".join(
            f"{b.name} {b.size - banks[b.mem_id].reserved - banks[b.mem_id].end()} of {b.size} bytes free"
            for b in self.target.banks
        )
        raise BankPlacementError(
            f"no bank can hold a {spec.allocated_memory}-byte tensor (shape {list(spec.shape)}): {left}; enlarge a "
            f"bank or declare another (undeclared arenas are never spill targets). Map: {self.target.describe()}"
        )

    def _result(
        self, banks: dict[int, _BankState], backed: list[TensorSpec], alignment: int, padding: int
    ) -> MemoryAlgoResult:
        size = max([DEFAULT_MEM_ID, *banks]) + 1
        result = MemoryAlgoResult({}, [0] * size)
        for mem_id, state in banks.items():
            if not state.specs:
                continue
            offsets = state.offsets
            bank_alignment = self._alignment(mem_id, alignment)
            relaid = _greedy_offsets(state.specs, bank_alignment, self.allow_overlapping_allocations)
            if _arena_size(state.specs, relaid, bank_alignment) <= _arena_size(state.specs, offsets, bank_alignment):
                offsets = relaid  # the greedy layout of this bank's tensors, never larger than the one planned
            objects = _shared_objects(state.specs, offsets)
            for spec, offset, obj in zip(state.specs, offsets, objects):
                result.spec_dict[spec] = SpecAllocResult(mem_id, obj, offset)
            end = max(o + s.allocated_memory for s, o in zip(state.specs, offsets))
            result.bufsizes[mem_id] = state.reserved + end + padding
        for spec in backed:
            root, offset = _storage_root(spec)
            spec.realign(alignment)
            where = result.spec_dict[root]
            result.spec_dict[spec] = SpecAllocResult(where.mem_id, where.mem_obj_id, where.mem_offset + offset)
        for bank in self.target.banks:
            if result.bufsizes[bank.mem_id] > bank.size:
                raise BankPlacementError(
                    f"bank {bank.name} (mem_id={bank.mem_id}) needs {result.bufsizes[bank.mem_id]} bytes but holds "
                    f"{bank.size}; map: {self.target.describe()}"
                )
        return result


def _live_together(a: TensorSpec, b: TensorSpec) -> bool:
    return a.lifetime[0] <= b.lifetime[1] and b.lifetime[0] <= a.lifetime[1]


def _free_slot(state: _BankState, spec: TensorSpec) -> int:
    """Without partial overlaps: the offset of a placed tensor whose span no live tensor touches, else the end."""
    for s, o in zip(state.specs, state.offsets):
        span = (o, o + s.allocated_memory)
        if s.allocated_memory >= spec.allocated_memory and not any(
            _live_together(t, spec) and p < span[1] and span[0] < p + t.allocated_memory
            for t, p in zip(state.specs, state.offsets)
        ):
            return o
    return state.end()


def _reject_non_cpu(specs: Sequence[TensorSpec]) -> None:
    """A map describes one address space (the CPU's); a tensor on another device cannot be budgeted in it."""
    devices = sorted({_device_name(getattr(s, "device", None)) for s in specs} - {"CPU"})
    if devices:
        raise BankPlacementError(
            f"banked memory planning plans CPU tensors only; found tensors on {', '.join(devices)}; plan those "
            "with the device's own planner"
        )


def _device_name(device: object) -> str:
    if device is None:
        return "CPU"
    name = getattr(device, "name", None)
    return str(name).upper() if name is not None else str(device).upper()


def _reserved(graph_module: torch.fx.GraphModule | None, mem_id: int) -> int:
    """Bytes a control-flow submodule already holds in arena ``mem_id``."""
    sizes = getattr(graph_module, "input_mem_buffer_sizes", None) or []
    return sizes[mem_id] if mem_id < len(sizes) else 0


def banked_memory_planning_pass(
    target: TargetMemoryMap,
    alignment: int = ALIGNMENT,
    allow_overlapping_allocations: bool = True,
    **kwargs: object,
) -> MemoryPlanningPass:
    """A MemoryPlanningPass planning with :class:`BankedGreedy` alone; other keywords go to the pass."""
    if kwargs.get("share_mutable_buffers"):
        raise ValueError(
            "share_mutable_buffers is not supported with banked memory planning: shared state needs an arena of "
            "its own outside the banks; plan without share_mutable_buffers"
        )
    kwargs.pop("share_mutable_buffers", None)
    planner = BankedGreedy(target, allow_overlapping_allocations=allow_overlapping_allocations)
    return MemoryPlanningPass(
        memory_planning_algo=MemoryPlanningAlgorithmSuite(algo_list=[planner]),
        alignment=alignment,
        **kwargs,  # type: ignore[arg-type]
    )


def planned_mem_ids(graph_module: torch.fx.GraphModule) -> list[int]:
    """The arena of each planned, non-constant tensor of the graph, in node order."""
    seen: set[int] = set()
    mem_ids = []
    for node in graph_module.graph.nodes:
        for spec in get_node_tensor_specs(node):
            if id(spec) not in seen and not spec.const and spec.mem_id is not None:
                seen.add(id(spec))
                mem_ids.append(spec.mem_id)
    return mem_ids


def format_placement_report(target: TargetMemoryMap, bufsizes: Sequence[int], mem_ids: Iterable[int] = ()) -> str:
    """A table of each bank's used bytes, size, occupancy and tensor count."""
    counts: dict[int, int] = {}
    for mem_id in mem_ids:
        counts[mem_id] = counts.get(mem_id, 0) + 1
    rows = ["Memory bank placement:", f"  {'bank':<12}{'mem_id':>7}{'used':>12}{'size':>12}{'util':>8}{'buffers':>9}"]
    total = 0
    for bank in target.banks:
        used = bufsizes[bank.mem_id] if bank.mem_id < len(bufsizes) else 0
        total += used
        rows.append(
            f"  {bank.name:<12}{bank.mem_id:>7}{used:>12}{bank.size:>12}"
            f"{100.0 * used / bank.size:>7.1f}%{counts.get(bank.mem_id, 0):>9}"
        )
    rows.append(f"  total planned: {total} bytes over {len(target.banks)} banks")
    return "\n".join(rows)
