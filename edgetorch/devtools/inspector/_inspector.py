"""The Inspector: ETDump (what the runtime did) joined with an ETRecord (what export produced).

Mirrors ``executorch.devtools.Inspector``: ``event_blocks`` (one block per
distinct kind of run; identical runs are merged so each event's
``perf_data.raw`` holds one sample per run), ``to_dataframe``,
``print_data_tabular``, ``find_total_for_module``, ``get_exported_program``
and ``calculate_numeric_gap``. With an ETRecord each instruction event gets
the debug handles of the Edge nodes it ran, their operator names, stack traces
and module hierarchy; delegate events are mapped through the delegate map.
Reads ETDumps from edgetorch's runtime and from ExecuTorch's alike. Allocation
events (``ETDumpGen(track_allocations=True)``) are listed per block in
``EventBlock.allocations``, ``allocations_to_dataframe`` and the printed table.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import torch

from edgetorch.devtools.extras import require
from edgetorch.devtools.inspector._inspector_utils import (
    EXCLUDED_COLUMNS_WHEN_PRINTING,
    EXCLUDED_EVENTS_WHEN_PRINTING,
    OPERATOR_CALL,
    RESERVED_FRAMEWORK_EVENT_NAMES,
    TimeScale,
    aot_outputs,
    calculate_time_scale_factor,
    debug_events,
    is_debug_output,
    lookup,
    run_signature,
)
from edgetorch.exir.etrecord import ETRecord, parse_etrecord
from edgetorch.format import etdump as fe
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY


class PerfData:
    """The samples of one event (one per run, in the target time scale) and their statistics."""

    def __init__(self, raw: list[float]):
        self.raw = list(raw)

    def _pct(self, q: float) -> float:
        return float(np.percentile(self.raw, q))

    @property
    def p10(self) -> float:
        return self._pct(10)

    @property
    def p50(self) -> float:
        return self._pct(50)

    @property
    def p90(self) -> float:
        return self._pct(90)

    @property
    def avg(self) -> float:
        return float(np.mean(self.raw))

    @property
    def min(self) -> float:
        return float(np.min(self.raw))

    @property
    def max(self) -> float:
        return float(np.max(self.raw))


@dataclass
class Event:
    """One runtime event (an operator, a delegate's inner op, a method execution) across the runs of a block."""

    name: str
    perf_data: PerfData | None = None
    op_types: list[str] = field(default_factory=list)
    delegate_debug_identifier: int | str | None = None
    debug_handles: int | Sequence[int] | None = None
    num_outputs: int = 1
    stack_traces: dict[str, str] = field(default_factory=dict)
    module_hierarchy: dict[str, dict] = field(default_factory=dict)
    is_delegated_op: bool | None = None
    delegate_backend_name: str | None = None
    debug_data: list[Any] = field(default_factory=list)
    _instruction_id: int | None = None
    _start_times: list[int] = field(default_factory=list)
    _raw_delegate_metadata: list[bytes] = field(default_factory=list)
    _delegate_metadata_parser: Callable | None = None

    @property
    def start_time(self) -> list[int]:
        return list(self._start_times)

    @property
    def raw_delegate_debug_metadatas(self) -> list[bytes]:
        return list(self._raw_delegate_metadata)

    @property
    def delegate_debug_metadatas(self) -> list[str] | dict[str, Any]:
        if self._delegate_metadata_parser is None or not self._raw_delegate_metadata:
            return []
        parsed = self._delegate_metadata_parser(self._raw_delegate_metadata)
        if not isinstance(parsed, (list, dict)):
            raise ValueError(f"Unexpected type for delegate_debug_metadata: {type(parsed).__name__}")
        return parsed

    def asdict(self, units: str = "", include_delegate_debug_data: bool = False) -> dict[str, Any]:
        perf = self.perf_data
        row: dict[str, Any] = {"event_name": self.name, "raw": perf.raw if perf else []}
        for stat in ("p10", "p50", "p90", "avg", "min", "max"):
            row[stat + units] = getattr(perf, stat) if perf and perf.raw else None
        row.update(
            op_types=self.op_types,
            delegate_debug_identifier=self.delegate_debug_identifier,
            stack_traces=self.stack_traces,
            module_hierarchy=self.module_hierarchy,
            is_delegated_op=self.is_delegated_op,
            delegate_backend_name=self.delegate_backend_name,
            debug_data=self.debug_data,
            start_time=self.start_time,
        )
        if include_delegate_debug_data:
            meta = self.delegate_debug_metadatas
            row.update(meta if isinstance(meta, dict) else {"delegate_debug_metadata": meta})
        return row


@dataclass
class Allocation:
    """One allocation event of an ETDump: ``size`` bytes from the allocator named ``allocator``."""

    allocator: str
    size: int


@dataclass
class EventBlock:
    """The events of one kind of run (``"Default"``: loading; ``"Execute"``: an execution).

    ``allocations`` lists the block's allocation events (of its first run), in the order they happened.
    """

    name: str
    events: list[Event] = field(default_factory=list)
    source_time_scale: TimeScale = TimeScale.NS
    target_time_scale: TimeScale = TimeScale.MS
    bundled_input_index: int | None = None
    run_output: list[Any] | None = None
    reference_output: list[Any] | None = None
    allocations: list[Allocation] = field(default_factory=list)

    def to_dataframe(self, include_units: bool = False, include_delegate_debug_data: bool = False) -> Any:
        pd = require("pandas", "EventBlock.to_dataframe")

        units = f" ({self.target_time_scale.value})" if include_units else ""
        rows = [{"event_block_name": self.name, **e.asdict(units, include_delegate_debug_data)} for e in self.events]
        return pd.DataFrame(rows)


class Inspector:
    """Join an ETDump (path or bytes) with an optional ETRecord (path or :class:`ETRecord`).

    ``debug_buffer_path`` (``buffer_path`` is accepted too, as some of ExecuTorch's pages spell it)
    holds the tensors the ETDump's debug events point into; without it events have no ``debug_data``.
    """

    def __init__(
        self,
        etdump_path: str | os.PathLike | None = None,
        etdump_data: bytes | None = None,
        etrecord: ETRecord | str | os.PathLike | None = None,
        source_time_scale: TimeScale = TimeScale.NS,
        target_time_scale: TimeScale = TimeScale.MS,
        debug_buffer_path: str | os.PathLike | None = None,
        delegate_metadata_parser: Callable | None = None,
        delegate_time_scale_converter: Callable | None = None,
        enable_module_hierarchy: bool = False,
        buffer_path: str | os.PathLike | None = None,
    ):
        if (etdump_path is None) == (etdump_data is None):
            raise ValueError("Expecting exactly one of etdump_path or etdump_data to be specified.")
        source, target = TimeScale(source_time_scale), TimeScale(target_time_scale)
        self._ticks_per_unit = calculate_time_scale_factor(source, target)
        self._delegate_scale = delegate_time_scale_converter
        if etrecord is None or isinstance(etrecord, ETRecord):
            self._etrecord = etrecord
        elif isinstance(etrecord, (str, os.PathLike)):
            self._etrecord = parse_etrecord(etrecord)
        else:
            raise TypeError("Unsupported ETRecord type")
        if etdump_data is None:
            with open(etdump_path, "rb") as f:
                etdump_data = f.read()
        buffer_path = debug_buffer_path or buffer_path
        if buffer_path is None:
            warnings.warn("Output Buffer not found. Tensor Debug Data will not be available.", stacklevel=2)
            self._buffer = None
        else:
            with open(buffer_path, "rb") as f:
                self._buffer = f.read()
        self._parser = delegate_metadata_parser
        self.event_blocks = self._blocks(fe.deserialize_etdump(etdump_data), source, target)

    # ------------------------------------------------------------------ building the blocks

    def _blocks(self, etdump: fe.ETDump, source: TimeScale, target: TimeScale) -> list[EventBlock]:
        grouped: dict[tuple, list[fe.RunData]] = {}
        for run in etdump.run_data:
            grouped.setdefault((run.name or "", run_signature(run)), []).append(run)
        blocks = []
        for (name, _), runs in grouped.items():
            block = EventBlock(name=name, source_time_scale=source, target_time_scale=target)
            block.bundled_input_index = runs[0].bundled_input_index if runs[0].bundled_input_index != -1 else None
            block.events = self._events(runs)
            block.allocations = _allocations(runs[0])
            outputs = [self._value(d.debug_entry) for d in debug_events(runs[-1]) if is_debug_output(d)]
            block.run_output = outputs or None
            if self._etrecord is not None and self._etrecord._reference_outputs and name == "Execute":
                refs = self._etrecord._reference_outputs.get("forward") or []
                if block.bundled_input_index is not None and block.bundled_input_index < len(refs):
                    block.reference_output = refs[block.bundled_input_index]
            blocks.append(block)
        return blocks

    def _events(self, runs: list[fe.RunData]) -> list[Event]:
        profiles = [[e.profile_event for e in run.events if e.profile_event is not None] for run in runs]
        debug_of: dict[tuple, list[Any]] = {}
        for d in debug_events(runs[-1]):
            if not is_debug_output(d):
                key = (d.instruction_id, d.delegate_debug_id_int, d.delegate_debug_id_str or None)
                debug_of.setdefault(key, []).append(self._value(d.debug_entry))
        events = []
        for i, first in enumerate(profiles[0]):
            samples = [run[i] for run in profiles]
            delegated = first.delegate_debug_id_int != -1 or bool(first.delegate_debug_id_str)
            raw = [self._elapsed(p, delegated) for p in samples]
            identifier = (
                first.delegate_debug_id_int if first.delegate_debug_id_int != -1 else first.delegate_debug_id_str
            )
            event = Event(
                name=str(identifier) if delegated else first.name or "",  # ExecuTorch names delegated ones by id
                perf_data=PerfData(raw),
                delegate_debug_identifier=identifier if delegated else None,
                is_delegated_op=delegated,
                _instruction_id=first.instruction_id if first.instruction_id != -1 else None,
                _start_times=[int(p.start_time) for p in samples],
                _raw_delegate_metadata=[bytes(p.delegate_debug_metadata) for p in samples if p.delegate_debug_metadata],
                _delegate_metadata_parser=self._parser,
            )
            if first.chain_index == 0:  # an instruction's event (method-level events use chain -1)
                key = (first.instruction_id, first.delegate_debug_id_int, first.delegate_debug_id_str or None)
                event.debug_data = debug_of.get(key, [])
            self._link(event)
            events.append(event)
        return events

    def _elapsed(self, p: fe.ProfileEvent, delegated: bool) -> float:
        ticks = int(p.end_time) - int(p.start_time)
        if delegated and self._delegate_scale is not None:
            return self._delegate_scale(p.name, ticks)
        return ticks / self._ticks_per_unit

    def _value(self, value: fe.Value | None) -> Any:
        if value is None:
            return None
        if value.val == fe.ValueType.Tensor:
            return self._tensor(value.tensor)
        if value.val == fe.ValueType.TensorList:
            return [self._tensor(t) for t in value.tensor_list.tensors]
        holder = {
            fe.ValueType.Int: value.int_value,
            fe.ValueType.Bool: value.bool_value,
            fe.ValueType.Float: value.float_value,
            fe.ValueType.Double: value.double_value,
        }.get(value.val)
        return None if holder is None else next(iter(vars(holder).values()))

    def _tensor(self, t: fe.Tensor) -> Any:
        if self._buffer is None:
            return None
        dtype = SCALAR_TO_NUMPY[t.scalar_type]
        count = int(np.prod(t.sizes)) if t.sizes else 1
        if count == 0:  # ExecuTorch stores no bytes (offset -1) for an empty tensor
            return torch.from_numpy(np.empty(t.sizes, dtype))
        end = t.offset + count * dtype.itemsize
        if t.offset < 0 or end > len(self._buffer):
            raise ValueError(f"a debug event points at bytes {t.offset}..{end} of a {len(self._buffer)}-byte buffer")
        data = np.frombuffer(self._buffer, dtype, count, t.offset).reshape(t.sizes).copy()
        return torch.from_numpy(data)

    # ------------------------------------------------------------------ linking to the ETRecord

    def _link(self, event: Event) -> None:
        """Give ``event`` the debug handles of its instruction (through the delegate map, for an event inside a
        delegate) and the operators, traces and modules of the Edge nodes with those handles.

        As ExecuTorch's Inspector does, every event with an instruction id is linked, the runtime's own events
        (``Method::init``, ``Method::execute``: instruction 0) included, but those get no nodes.
        """
        record = self._etrecord
        if record is None or not record._debug_handle_map:
            return
        pc = event._instruction_id
        handles = lookup(record._debug_handle_map.get("forward", {}), pc)
        if handles is None:
            return
        event.num_outputs = lookup((record._instruction_id_to_num_outs_map or {}).get("forward", {}), pc) or 1
        delegate = lookup((record._delegate_map or {}).get("forward", {}), pc)
        if delegate and (event.is_delegated_op or event.name == "DELEGATE_CALL"):
            event.delegate_backend_name = delegate.get("name")
        if event.is_delegated_op and delegate:
            inner = delegate.get("delegate_map") or {}
            ident = event.delegate_debug_identifier
            handles = inner.get(ident, inner.get(str(ident)))
            if handles is None:
                return
        event.debug_handles = handles
        if event.name in RESERVED_FRAMEWORK_EVENT_NAMES:
            return
        graph = self._graph_nodes()
        # a node per handle, in the handles' order; a handle listed twice lists its nodes twice, as ExecuTorch's do
        nodes = [
            n
            for h in ([handles] if isinstance(handles, int) else handles)
            for n in graph
            if n.meta.get("debug_handle") == h
        ]
        event.op_types = [n.target.__name__ for n in nodes]
        event.stack_traces = {n.name: n.meta["stack_trace"] for n in nodes if n.meta.get("stack_trace")}
        event.module_hierarchy = {n.name: n.meta["nn_module_stack"] for n in nodes if n.meta.get("nn_module_stack")}

    def _graph_nodes(self) -> list[torch.fx.Node]:
        program = self.get_exported_program()
        if program is None:
            return []
        graphs = [program.graph]
        for module in program.graph_module.children():  # delegates: the Edge nodes they took over
            original = getattr(module, "original_module", None)
            if original is not None:
                graphs.append(original.graph)
        return [n for g in graphs for n in g.nodes if n.op == "call_function"]

    # ------------------------------------------------------------------ views

    def to_dataframe(self, include_units: bool = True, include_delegate_debug_data: bool = False) -> Any:
        """One row per event of every block (pandas)."""
        pd = require("pandas", "Inspector.to_dataframe")

        frames = [b.to_dataframe(include_units, include_delegate_debug_data) for b in self.event_blocks]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def print_data_tabular(
        self, file: IO[str] | None = None, include_units: bool = True, include_delegate_debug_data: bool = False
    ) -> None:
        """Print the events as a table (without OPERATOR_CALL rows, raw samples, traces and tensors)."""
        tabulate = require("tabulate", "Inspector.print_data_tabular").tabulate

        df = self.to_dataframe(include_units, include_delegate_debug_data)
        if len(df):
            df = df[~df.event_name.isin(EXCLUDED_EVENTS_WHEN_PRINTING)].drop(columns=EXCLUDED_COLUMNS_WHEN_PRINTING)
        print(tabulate(df, headers="keys", tablefmt="fancy_grid"), file=file or sys.stdout)
        allocations = self.allocations_to_dataframe()
        if len(allocations):
            print(tabulate(allocations, headers="keys", tablefmt="fancy_grid"), file=file or sys.stdout)

    def allocations_to_dataframe(self) -> Any:
        """One row per allocation event of every block: block, allocator, bytes (pandas)."""
        pd = require("pandas", "Inspector.allocations_to_dataframe")

        rows = [
            {"event_block_name": b.name, "allocator": a.allocator, "allocation_size (bytes)": a.size}
            for b in self.event_blocks
            for a in b.allocations
        ]
        return pd.DataFrame(rows, columns=["event_block_name", "allocator", "allocation_size (bytes)"])

    def save_data_to_tsv(
        self, file: IO[str] | str | os.PathLike, include_units: bool = True, include_delegate_debug_data: bool = False
    ) -> None:
        """Every event as a tab-separated table, in ``file`` (an open text file or a path)."""
        self.to_dataframe(include_units, include_delegate_debug_data).to_csv(file, sep="\t")

    def find_total_for_module(self, module_name: str) -> float:
        """Sum of the average times of the operator events whose module hierarchy names ``module_name``."""
        total = 0.0
        for block in self.event_blocks:
            for event in block.events:
                if event.name == OPERATOR_CALL or event.perf_data is None:
                    continue
                stacks = event.module_hierarchy.values()
                if any(module_name in key for stack in stacks for key in stack):
                    total += event.perf_data.avg
        return total

    def get_exported_program(self, graph: str | None = None) -> Any:
        """The ETRecord's Edge program (or ``graph`` from its graph map); None without an ETRecord."""
        record = self._etrecord
        if record is None:
            warnings.warn("No ETRecord was given to the Inspector; there is no exported program.", stacklevel=2)
            return None
        if graph is not None:
            return (record.graph_map or {}).get(graph)
        edge = record.edge_dialect_program
        return edge.get("forward") if isinstance(edge, dict) else edge

    def get_op_list(self) -> list[str]:
        """The Edge operators the runtime executed (from the ETRecord), in execution order, without repeats."""
        seen: dict[str, None] = {}
        for block in self.event_blocks:
            for event in block.events:
                if event.name != OPERATOR_CALL:
                    seen.update(dict.fromkeys(event.op_types))
        return list(seen)

    def calculate_numeric_gap(self, distance: Any = "MSE", disable_debug_handle_valdiation: bool = False) -> Any:
        """Per runtime operator, the gap between its output and the eager output of the Edge nodes it ran.

        Runs the ETRecord's Edge program on its representative inputs in PyTorch, keeping every node's
        output by debug handle, and compares it with the runtime's intermediate outputs (ETDump debug
        events) of the instructions with those handles. ``distance``: ``"MSE"``, ``"L1"``, ``"SNR"``
        (any case) or a :class:`NumericalComparatorBase`. Returns a DataFrame with columns
        ``aot_ops, aot_intermediate_output, runtime_ops, runtime_intermediate_output, gap``.
        """
        from edgetorch.devtools.inspector.numerical_comparator import comparator_for

        pd = require("pandas", "Inspector.calculate_numeric_gap")

        comparator = comparator_for(distance)
        record = self._etrecord
        if record is None or not record._representative_inputs:
            raise ValueError(
                "Missing etrecord or missing representative inputs within etrecord, both of which are required "
                "for calculating numerical gap; record them with etrecord.update_representative_inputs(...)"
            )
        aot = aot_outputs(self.get_exported_program(), record._representative_inputs[0])
        rows = []
        for block in self.event_blocks:
            for event, handles in compared_events(block, aot):
                aot_ops, aot_value = aot[handles[-1]]
                runtime = event.debug_data[0] if len(event.debug_data) == 1 else event.debug_data
                reference = aot_value if not isinstance(aot_value, (list, tuple)) else aot_value[0]
                got = runtime if not isinstance(runtime, list) else runtime[0]
                rows.append(
                    {
                        "aot_ops": aot_ops,
                        "aot_intermediate_output": reference,
                        "runtime_ops": event.op_types,
                        "runtime_intermediate_output": got,
                        "gap": [comparator.compare(reference, got.reshape(reference.shape))],
                    }
                )
        return pd.DataFrame(
            rows, columns=["aot_ops", "aot_intermediate_output", "runtime_ops", "runtime_intermediate_output", "gap"]
        )


def compared_events(block: EventBlock, aot: dict[int, Any]) -> list[tuple[Event, list[int]]]:
    """The events of ``block`` to compare with eager outputs, each with its debug handles that have one.

    Several instructions can carry the same debug handles (a quantize and the dequantize after it come from
    one quantized node; a decomposed operator runs as several kernels). Only the last of such a group is
    compared, with the eager output of the group's last node, as ExecuTorch's Inspector pairs them: the
    earlier ones hold intermediate values (int8 codes, partial results) that have no eager counterpart.
    """
    candidates = []
    for event in block.events:
        if event.name == OPERATOR_CALL or not event.debug_data or event.debug_handles is None:
            continue
        handles = [event.debug_handles] if isinstance(event.debug_handles, int) else list(event.debug_handles)
        known = [h for h in handles if h in aot]
        if known:
            candidates.append((event, known))
    last = {tuple(sorted(known)): i for i, (_, known) in enumerate(candidates)}
    return [c for i, c in enumerate(candidates) if last[tuple(sorted(c[1]))] == i]


def _allocations(run: fe.RunData) -> list[Allocation]:
    names = [a.name or "" for a in run.allocators]
    found = []
    for e in run.events:
        if (a := e.allocation_event) is not None:
            known = 0 < a.allocator_id <= len(names)  # ids count from 1
            found.append(
                Allocation(
                    names[a.allocator_id - 1] if known else f"allocator {a.allocator_id}", int(a.allocation_size)
                )
            )
    return found


__all__ = ["Allocation", "Event", "EventBlock", "Inspector", "PerfData", "TimeScale", "compared_events"]
