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

import dataclasses
import logging
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, TypedDict

import numpy as np
import torch

from edgetorch.devtools.debug_format.base_schema import OperatorGraph, OperatorNode
from edgetorch.devtools.debug_format.et_schema import FXOperatorGraph
from edgetorch.devtools.etdump import schema_flatcc as flatcc
from edgetorch.devtools.extras import require
from edgetorch.devtools.inspector._inspector_utils import (
    EDGE_DIALECT_GRAPH_KEY,
    EXCLUDED_COLUMNS_WHEN_PRINTING,
    EXCLUDED_EVENTS_FOR_INTERMEDIATE_OUTPUT,
    EXCLUDED_EVENTS_WHEN_PRINTING,
    FORWARD,
    OPERATOR_CALL,
    RESERVED_FRAMEWORK_EVENT_NAMES,
    DebugDataMismatchError,
    DebugHandle,
    NodeFilter,
    TimeScale,
    calculate_time_scale_factor,
    create_debug_handle_to_op_node_mapping,
    find_populated_event,
    gen_etdump_object,
    gen_graphs_from_etrecord,
    get_aot_debug_handle_to_op_name_mapping,
    inflate_runtime_output,
    is_debug_output,
    is_inference_output_equal,
    lookup,
    map_runtime_aot_intermediate_outputs,
    merge_runtime_overlapping_debug_handles,
    propagate_back_debug_handle,
    verify_debug_data_equivalence,
)
from edgetorch.devtools.inspector._intermediate_output_capturer import IntermediateOutputCapturer
from edgetorch.exir.etrecord import ETRecord, parse_etrecord
from edgetorch.format import etdump as fe

log = logging.getLogger(__name__)

# Converts a delegate's timestamp (event name, time) into the target time scale.
TimeScaleConverter = Callable[[int | str, int | float], int | float]
DelegateMetadataParser = Callable[[list[Any]], Any]


# ---------------------------------------------------------------------- signatures: what makes two events the same


@dataclass(frozen=True, order=True)
class InstructionEventSignature:
    """Where an ETDump event happened: instruction, chain and, inside a delegate, the delegate's own id."""

    instruction_id: int
    chain_index: int
    delegate_id: int | None = None
    delegate_id_str: str | None = None


@dataclass
class InstructionEvent:
    """The profile and debug events one run logged at one :class:`InstructionEventSignature`."""

    signature: InstructionEventSignature
    profile_events: list[fe.ProfileEvent] | None = None
    debug_events: list[fe.DebugEvent] | None = None

    @staticmethod
    def gen_from_events(run_events: Sequence[fe.Event]) -> list[InstructionEvent]:
        """The events of one run collated by where they happened, in first-seen order. Program outputs (debug
        events marked as outputs) and allocation events are left out: they belong to no instruction."""
        collated: dict[InstructionEventSignature, InstructionEvent] = {}
        for event in run_events:
            if event.profile_event is None and event.debug_event is None and event.allocation_event is not None:
                continue
            logged = find_populated_event(event)
            signature = InstructionEventSignature(
                instruction_id=logged.instruction_id,
                chain_index=logged.chain_index,
                delegate_id=logged.delegate_debug_id_int,
                delegate_id_str=logged.delegate_debug_id_str or None,  # "" and absent both mean "not set"
            )
            instruction = collated.setdefault(signature, InstructionEvent(signature=signature))
            if isinstance(logged, fe.ProfileEvent):
                instruction.profile_events = [*(instruction.profile_events or []), logged]
            elif not is_debug_output(logged.debug_entry):
                instruction.debug_events = [*(instruction.debug_events or []), logged]
        return list(collated.values())


def _unset_to_none(event: fe.ProfileEvent | fe.DebugEvent) -> tuple[int | None, int | None, str | None]:
    """The instruction and delegate ids of an event, ETDump's "not set" values (-1, "") read as None."""
    return (
        event.instruction_id if event.instruction_id != -1 else None,
        event.delegate_debug_id_int if event.delegate_debug_id_int not in (-1, None) else None,
        event.delegate_debug_id_str or None,
    )


@dataclass(frozen=True, order=True)
class ProfileEventSignature:
    """A profile event by identity: its name, instruction and delegate ids (None when not set)."""

    name: str
    instruction_id: int | None
    delegate_id: int | None = None
    delegate_id_str: str | None = None

    @staticmethod
    def _gen_from_event(event: fe.ProfileEvent) -> ProfileEventSignature:
        return ProfileEventSignature(event.name or "", *_unset_to_none(event))


@dataclass(frozen=True, order=True)
class DebugEventSignature:
    """A debug event by identity: its name, instruction and delegate ids (None when not set)."""

    name: str = ""
    instruction_id: int | None = -1
    delegate_id: int | None = None
    delegate_id_str: str | None = None

    @staticmethod
    def _gen_from_event(event: fe.DebugEvent) -> DebugEventSignature:
        return DebugEventSignature(event.name or "", *_unset_to_none(event))


@dataclass(frozen=True, order=True)
class EventSignature:
    """One Inspector event of a run: a profile event and the debug events logged at the same place."""

    instruction_id: int
    profile_event_signature: ProfileEventSignature | None = None
    debug_event_signature: DebugEventSignature | None = None

    @staticmethod
    def gen_from_instruction_event(
        instruction_event: InstructionEvent,
    ) -> list[tuple[EventSignature, InstructionEvent]]:
        """One signature per profile event of ``instruction_event`` (each with the instruction event cut down to
        that profile event), or one for its debug events when it has no profile event."""
        debug = instruction_event.debug_events
        debug_signature = DebugEventSignature._gen_from_event(debug[0]) if debug else None
        instruction_id = instruction_event.signature.instruction_id
        if instruction_event.profile_events is None:
            return [(EventSignature(instruction_id, debug_event_signature=debug_signature), instruction_event)]
        return [
            (
                EventSignature(instruction_id, ProfileEventSignature._gen_from_event(profile), debug_signature),
                dataclasses.replace(instruction_event, profile_events=[profile]),
            )
            for profile in instruction_event.profile_events
        ]


@dataclass(frozen=True, order=True)
class RunSignature:
    """A run by identity: runs with the same name, events and bundled input are merged into one block."""

    name: str
    events: tuple[EventSignature, ...] | None = None
    bundled_input_index: int | None = None


# A delegate's map from its own event identifiers to the debug handles they cover.
DelegateIdentifierDebugHandleMap = Mapping[int, DebugHandle] | Mapping[str, DebugHandle]


class DelegateMetadata(TypedDict):
    """What the ETRecord's delegate map holds for one delegate call: the backend's name and its handle map."""

    name: str
    delegate_map: DelegateIdentifierDebugHandleMap


# ---------------------------------------------------------------------- events and blocks


class PerfData:
    """The samples of one event (one per run, in the target time scale) and their statistics."""

    def __init__(self, raw: list[float]):
        self.raw = list(raw)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerfData) and self.raw == other.raw

    # mutable, like the dataclasses it sits in
    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PerfData(raw={self.raw})"

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


_UINT32_MAX = 2**32 - 1


@dataclass
class Event:
    """One runtime event (an operator, a delegate's inner op, a method execution) across the runs of a block."""

    name: str
    perf_data: PerfData | None = None
    op_types: list[str] = field(default_factory=list)
    delegate_debug_identifier: int | str | None = None
    debug_handles: int | Sequence[int] | None = None
    num_outputs: int = 1
    stack_traces: dict[str, str | None] = field(default_factory=dict)
    module_hierarchy: dict[str, Any] = field(default_factory=dict)
    is_delegated_op: bool | None = None
    delegate_backend_name: str | None = None
    _delegate_debug_metadatas: list[Any] = field(default_factory=list)
    debug_data: list[Any] = field(default_factory=list)
    _instruction_id: int | None = None
    _delegate_metadata_parser: DelegateMetadataParser | None = None
    _delegate_time_scale_converter: TimeScaleConverter | None = None
    _start_time: list[int | float] | None = None

    @property
    def start_time(self) -> list[int | float] | None:
        """The start timestamp of each sample (source time scale)."""
        return self._start_time

    @property
    def raw_delegate_debug_metadatas(self) -> list[Any]:
        """The delegate's metadata of each sample, as logged."""
        return self._delegate_debug_metadatas

    @property
    def delegate_debug_metadatas(self) -> list[Any] | dict[str, Any]:
        """The delegate's metadata, through the Inspector's ``delegate_metadata_parser`` when it has one."""
        if not self.is_delegated_op or self._delegate_metadata_parser is None:
            return self._delegate_debug_metadatas
        return self._delegate_metadata_parser(self._delegate_debug_metadatas)

    def asdict(self, _units: str = "", include_delegate_debug_data: bool = False) -> dict[str, Any]:
        """The event as one table row; ``_units`` is appended to the statistics' column names."""
        perf = self.perf_data
        row: dict[str, Any] = {"event_name": self.name, "raw": perf.raw if perf else None}
        for stat in ("p10", "p50", "p90", "avg", "min", "max"):
            row[stat + _units] = getattr(perf, stat) if perf and perf.raw else None
        row.update(
            op_types=self.op_types,
            delegate_debug_identifier=self.delegate_debug_identifier,
            stack_traces=self.stack_traces,
            module_hierarchy=self.module_hierarchy,
            is_delegated_op=self.is_delegated_op,
            delegate_backend_name=self.delegate_backend_name,
            debug_data=self.debug_data,
            start_time=self._start_time,
        )
        if include_delegate_debug_data and (meta := self.delegate_debug_metadatas):
            if not isinstance(meta, (list, dict)):
                raise ValueError(f"Unexpected type for delegate_debug_metadata: {type(meta).__name__}")
            row.update(meta if isinstance(meta, dict) else {"delegate_debug_metadata": meta})
        return row

    def to_dataframe(self, _units: str = "") -> Any:
        """The event as a one-row DataFrame (pandas)."""
        pd = require("pandas", "Event.to_dataframe")
        return pd.DataFrame([self.asdict(_units)])

    @staticmethod
    def _gen_from_inference_events(
        signature: EventSignature,
        events: list[InstructionEvent],
        scale_factor: float = 1.0,
        output_buffer: bytes | None = None,
        delegate_metadata_parser: DelegateMetadataParser | None = None,
        delegate_time_scale_converter: TimeScaleConverter | None = None,
    ) -> Event:
        """The Inspector event for ``signature`` from its instruction events in every run of a block: one
        timing sample per run (divided by ``scale_factor``, or converted by the delegate's converter) and the
        values it logged (read from ``output_buffer``; equal in every run)."""
        event = Event(
            name="",
            _instruction_id=signature.instruction_id,
            _delegate_metadata_parser=delegate_metadata_parser,
            _delegate_time_scale_converter=delegate_time_scale_converter,
        )
        Event._populate_profiling_related_fields(event, signature.profile_event_signature, events, scale_factor)
        Event._populate_debugging_related_fields(event, signature.debug_event_signature, events, output_buffer)
        return event

    @staticmethod
    def _calculate_elapsed_time(start_time: int | float, end_time: int | float) -> int | float:
        """``end - start``; an end before the start is a 32-bit clock that wrapped around."""
        if start_time <= end_time:
            return end_time - start_time
        if start_time > _UINT32_MAX or end_time > _UINT32_MAX:
            raise ValueError(
                f"an event ends ({end_time}) before it starts ({start_time}) with times beyond 32 bits: "
                "expected a wrapped-around 32-bit clock"
            )
        return (_UINT32_MAX - start_time) + end_time

    @staticmethod
    def _populate_event_signature_fields(
        ret_event: Event, event_signature: ProfileEventSignature | DebugEventSignature | None
    ) -> None:
        """Name, delegate identifier and whether the event ran inside a delegate (named then by its identifier)."""
        if event_signature is None:
            return
        identifier = (
            event_signature.delegate_id if event_signature.delegate_id is not None else event_signature.delegate_id_str
        )
        delegated = identifier is not None
        name = str(identifier) if delegated else event_signature.name
        if name:  # older ETDumps have unnamed debug events: keep the name the profile event gave
            ret_event.name = name
        ret_event.delegate_debug_identifier = identifier
        ret_event.is_delegated_op = delegated

    @staticmethod
    def _populate_profiling_related_fields(
        ret_event: Event,
        profile_event_signature: ProfileEventSignature | None,
        events: list[InstructionEvent],
        scale_factor: float,
    ) -> None:
        """Timing samples, start times and delegate metadata from the profile event of each run."""
        Event._populate_event_signature_fields(ret_event, profile_event_signature)
        samples: list[float] = []
        starts: list[int | float] = []
        metadata: list[Any] = []
        for instruction in events:
            if instruction.profile_events is None:
                continue
            if len(instruction.profile_events) != 1:
                raise ValueError(
                    "expected one profile event per instruction event when making an Inspector event, found "
                    f"{len(instruction.profile_events)}; split them with EventSignature.gen_from_instruction_event"
                )
            profile = instruction.profile_events[0]
            convert = ret_event._delegate_time_scale_converter
            if ret_event.is_delegated_op and convert is not None:
                elapsed = Event._calculate_elapsed_time(
                    convert(ret_event.name, profile.start_time), convert(ret_event.name, profile.end_time)
                )
            else:  # a delegate without a converter counts in the source time scale, as the Inspector's default
                elapsed = float(Event._calculate_elapsed_time(profile.start_time, profile.end_time)) / scale_factor
            samples.append(elapsed)
            starts.append(profile.start_time)
            raw = profile.delegate_debug_metadata
            metadata.append(bytes(raw) if isinstance(raw, memoryview) else raw or "")
        if samples:
            ret_event.perf_data = PerfData(samples)
            ret_event._start_time = starts
        if any(metadata):
            ret_event._delegate_debug_metadatas = metadata

    @staticmethod
    def _populate_debugging_related_fields(
        ret_event: Event,
        debug_event_signature: DebugEventSignature | None,
        events: list[InstructionEvent],
        output_buffer: bytes | None = None,
    ) -> None:
        """The values the event logged (``debug_data``), checked to be the same in every run."""
        Event._populate_event_signature_fields(ret_event, debug_event_signature)
        first: list[Any] | None = None
        for instruction in events:
            if instruction.debug_events is None:
                continue
            values = [inflate_runtime_output(_entry(d), output_buffer) for d in instruction.debug_events]
            if first is None:
                first = values
                continue
            for i, (a, b) in enumerate(zip(values, first)):
                if not is_inference_output_equal(a, b):
                    raise DebugDataMismatchError(
                        f"event {ret_event.name!r}: value {i} differs between runs of one event block; the "
                        "model or runtime is not deterministic"
                    )
        ret_event.debug_data = first or []

    def _associate_with_op_graph_nodes(self, debug_handle_to_op_node_map: Mapping[int, list[OperatorNode]]) -> None:
        """Operator types, stack traces and module hierarchy of the graph nodes with this event's handles.

        The runtime's own events (``Method::init``, ``Method::execute``) carry handles but no nodes.
        """
        if self.name in RESERVED_FRAMEWORK_EVENT_NAMES or self.debug_handles is None:
            return
        handles = [self.debug_handles] if isinstance(self.debug_handles, int) else self.debug_handles
        for handle in handles:
            for node in debug_handle_to_op_node_map.get(handle) or []:
                if node is None or node.metadata is None:
                    continue
                if node.name not in self.stack_traces:
                    self.stack_traces[node.name] = node.metadata.get("stack_trace")
                    self.module_hierarchy[node.name] = node.metadata.get("nn_module_stack")
                if node.op:
                    self.op_types.append(node.op)


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
        """One row per event (pandas); OPERATOR_CALL rows time the call overhead of the operator before them."""
        pd = require("pandas", "EventBlock.to_dataframe")

        units = f" ({TimeScale(self.target_time_scale).value})" if include_units else ""
        rows = [{"event_block_name": self.name, **e.asdict(units, include_delegate_debug_data)} for e in self.events]
        return pd.DataFrame(rows)

    @staticmethod
    def _gen_from_etdump(
        etdump: fe.ETDump,
        source_time_scale: TimeScale = TimeScale.NS,
        target_time_scale: TimeScale = TimeScale.MS,
        output_buffer: bytes | None = None,
        delegate_metadata_parser: DelegateMetadataParser | None = None,
        delegate_time_scale_converter: TimeScaleConverter | None = None,
    ) -> list[EventBlock]:
        """The event blocks of an ETDump: runs with the same :class:`RunSignature` form one block, each of its
        events holding one sample per run. Logged values and program outputs must agree across those runs."""
        groups: dict[RunSignature, tuple[dict[EventSignature, list[InstructionEvent]], list[Any], fe.RunData]] = {}
        for run in etdump.run_data:
            if run.events is None:
                continue
            signatures: dict[EventSignature, InstructionEvent] = {}
            for instruction in InstructionEvent.gen_from_events(run.events):
                if instruction.debug_events is None and instruction.profile_events is None:
                    continue  # only program outputs were logged there
                signatures.update(EventSignature.gen_from_instruction_event(instruction))
            key = RunSignature(run.name or "", tuple(signatures), run.bundled_input_index)
            outputs = EventBlock._collect_run_outputs(run.events, output_buffer)
            if key not in groups:
                groups[key] = ({}, outputs, run)
            else:
                verify_debug_data_equivalence(groups[key][1], outputs)
            for signature, instruction in signatures.items():
                groups[key][0].setdefault(signature, []).append(instruction)
        scale = calculate_time_scale_factor(source_time_scale, target_time_scale)
        return [
            EventBlock(
                name=key.name,
                events=[
                    Event._gen_from_inference_events(
                        signature,
                        instructions,
                        scale,
                        output_buffer,
                        delegate_metadata_parser,
                        delegate_time_scale_converter,
                    )
                    for signature, instructions in events.items()
                ],
                source_time_scale=source_time_scale,
                target_time_scale=target_time_scale,
                bundled_input_index=key.bundled_input_index,
                run_output=outputs,
                allocations=_allocations(first_run),
            )
            for key, (events, outputs, first_run) in groups.items()
        ]

    @staticmethod
    def _collect_run_outputs(events: Sequence[fe.Event], output_buffer: bytes | None = None) -> list[Any]:
        """The program outputs a run logged (debug events marked as outputs), in order."""
        outputs = []
        for event in events:
            if event.debug_event is None:
                continue
            if event.debug_event.debug_entry is None:
                raise ValueError("an ETDump debug event holds no value; the ETDump is corrupt")
            if is_debug_output(event.debug_event.debug_entry):
                outputs.append(inflate_runtime_output(event.debug_event.debug_entry, output_buffer))
        return outputs

    def _gen_resolve_debug_handles(
        self,
        handle_map: Mapping[Any, Any],
        delegate_map: Mapping[Any, DelegateMetadata] | None = None,
        instruction_id_to_num_outs_map: Mapping[Any, int] | None = None,
    ) -> None:
        """Give each event the debug handles of its instruction (ETRecord maps keyed by instruction id, as int
        or as JSON's str); an event inside a delegate gets them through that delegate's own map."""
        for event in self.events:
            handles = lookup(handle_map, event._instruction_id)
            if handles is None:
                continue
            event.num_outputs = lookup(instruction_id_to_num_outs_map or {}, event._instruction_id) or 1
            delegate = lookup(delegate_map or {}, event._instruction_id)
            if event.delegate_debug_identifier is None:
                event.debug_handles = handles
                if event.name == "DELEGATE_CALL" and delegate is not None:
                    event.delegate_backend_name = delegate.get("name", "")
                continue
            if delegate is None:
                event.debug_handles = handles
                log.warning("No delegate mapping found for delegate with instruction id %s", event._instruction_id)
                continue
            event.delegate_backend_name = delegate.get("name", "")
            inner = delegate.get("delegate_map") or {}
            ident = event.delegate_debug_identifier
            event.debug_handles = inner.get(ident, inner.get(str(ident)))


class Inspector:
    """Join an ETDump (path or bytes) with an optional ETRecord (path or :class:`ETRecord`).

    ``debug_buffer_path`` (``buffer_path`` is accepted too, as some of ExecuTorch's pages spell it)
    holds the tensors the ETDump's debug events point into; without it logged tensors read as zeros of
    their shape. ``reference_graph_name`` picks the ETRecord graph whose nodes name the events' operators.
    """

    def __init__(
        self,
        etdump_path: str | os.PathLike | None = None,
        etdump_data: bytes | None = None,
        etrecord: ETRecord | str | os.PathLike | None = None,
        source_time_scale: TimeScale = TimeScale.NS,
        target_time_scale: TimeScale = TimeScale.MS,
        debug_buffer_path: str | os.PathLike | None = None,
        delegate_metadata_parser: DelegateMetadataParser | None = None,
        delegate_time_scale_converter: TimeScaleConverter | None = None,
        enable_module_hierarchy: bool = False,
        reference_graph_name: str = EDGE_DIALECT_GRAPH_KEY,
        buffer_path: str | os.PathLike | None = None,
    ):
        source, target = TimeScale(source_time_scale), TimeScale(target_time_scale)
        scale = calculate_time_scale_factor(source, target)
        if delegate_time_scale_converter is None:

            def delegate_time_scale_converter(event_name: int | str, time: int | float) -> float:
                return time / scale

        self._source_time_scale, self._target_time_scale = source, target
        if etrecord is None or isinstance(etrecord, ETRecord):
            self._etrecord = etrecord
        elif isinstance(etrecord, (str, os.PathLike)):
            self._etrecord = parse_etrecord(etrecord_path=etrecord)
        else:
            raise TypeError(f"Unsupported ETRecord type {type(etrecord).__name__}: pass an ETRecord or its path")
        if (etdump_path is None) == (etdump_data is None):
            raise ValueError("Expecting exactly one of etdump_path or etdump_data to be specified.")
        etdump = gen_etdump_object(etdump_path=etdump_path, etdump_data=etdump_data)
        buffer_path = debug_buffer_path or buffer_path
        if buffer_path is None:
            warnings.warn("Output Buffer not found. Tensor Debug Data will not be available.", stacklevel=2)
            output_buffer = None
        else:
            with open(buffer_path, "rb") as f:
                output_buffer = f.read()
        self.event_blocks = EventBlock._gen_from_etdump(
            etdump=etdump,
            source_time_scale=source,
            target_time_scale=target,
            output_buffer=output_buffer,
            delegate_metadata_parser=delegate_metadata_parser,
            delegate_time_scale_converter=delegate_time_scale_converter,
        )
        self.op_graph_dict: dict[str, OperatorGraph] | None = None
        self._reference_outputs: dict[str, list[Any]] = {}
        self._enable_module_hierarchy = enable_module_hierarchy
        self._consume_etrecord(reference_graph_name)

    def _consume_etrecord(self, reference_graph_name: str = EDGE_DIALECT_GRAPH_KEY) -> None:
        """Link the blocks to the ETRecord: debug handles per event, then the operators, stack traces and
        modules of the nodes with those handles, then each block's reference outputs (by bundled input)."""
        record = self._etrecord
        if record is None:
            return
        handle_map = (record._debug_handle_map or {}).get(FORWARD)
        if handle_map:
            for block in self.event_blocks:
                block._gen_resolve_debug_handles(
                    handle_map,
                    (record._delegate_map or {}).get(FORWARD),
                    (record._instruction_id_to_num_outs_map or {}).get(FORWARD),
                )
        self.op_graph_dict = gen_graphs_from_etrecord(record, enable_module_hierarchy=self._enable_module_hierarchy)
        graph = self.op_graph_dict.get(reference_graph_name)
        if graph is None and reference_graph_name != EDGE_DIALECT_GRAPH_KEY:
            raise ValueError(
                f"reference_graph_name {reference_graph_name!r} is not a graph of the ETRecord; "
                f"expected one of {sorted(self.op_graph_dict)}"
            )
        if graph is not None:
            nodes = create_debug_handle_to_op_node_mapping(graph)
            if reference_graph_name == EDGE_DIALECT_GRAPH_KEY:
                for handle, found in self._delegated_op_nodes().items():
                    nodes.setdefault(handle, found)
            for block in self.event_blocks:
                for event in block.events:
                    event._associate_with_op_graph_nodes(nodes)
        if record._reference_outputs:
            self._reference_outputs = record._reference_outputs
            references = self._reference_outputs.get(FORWARD) or []
            for block in self.event_blocks:
                index = block.bundled_input_index
                if index is not None and 0 <= index < len(references):  # -1: the run had no bundled input
                    block.reference_output = references[index]

    def _delegated_op_nodes(self) -> dict[int, list[OperatorNode]]:
        """Debug handle -> nodes of the Edge graphs the ETRecord's program handed to delegates (their original
        modules), so that events inside a delegate are named after the operators it took over."""
        program = self.get_exported_program()
        nodes: dict[int, list[OperatorNode]] = {}
        if program is None:
            return nodes
        for module in program.graph_module.children():
            original = getattr(module, "original_module", None)
            if original is not None:
                graph = FXOperatorGraph.gen_operator_graph(
                    original.graph_module, enable_module_hierarchy=self._enable_module_hierarchy
                )
                for handle, found in create_debug_handle_to_op_node_mapping(graph).items():
                    nodes.setdefault(handle, []).extend(found)
        return nodes

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

    # ------------------------------------------------------------------ numeric gap

    def _resolve_reference_graph(
        self, reference_graph: str | None = None, disable_debug_handle_validation: bool = False
    ) -> tuple[torch.fx.GraphModule, str]:
        """The graph module the eager outputs come from, and its name.

        ``"exported_program"``: the user's ATen program, its nodes given the Edge program's debug handles
        (:func:`propagate_back_debug_handle`; a ValueError when that fails); ``"edge_dialect_exported_program"``:
        the Edge program; another name: that graph of the ETRecord's graph map (``"<name>"`` meaning
        ``"<name>/forward"``). None tries the ATen program and falls back to the Edge program.
        """
        record = self._etrecord
        if record is None:
            raise ValueError("the Inspector has no ETRecord: there is no reference graph; pass etrecord=...")
        edge = record.edge_dialect_program
        edge = edge.get(FORWARD) if isinstance(edge, Mapping) else edge
        name = reference_graph or "exported_program"
        if reference_graph in (None, "exported_program"):
            if (
                record.exported_program is not None
                and record.export_graph_id is not None
                and edge is not None
                and propagate_back_debug_handle(
                    record.exported_program, record.export_graph_id, edge, disable_debug_handle_validation
                )
            ):
                name = "exported_program"
            elif reference_graph is None:
                log.warning(
                    "The ETRecord has no ATen exported program, or its debug handles could not be carried back "
                    "from the Edge program; using 'edge_dialect_exported_program' as the reference graph."
                )
                name = "edge_dialect_exported_program"
            else:
                raise ValueError(
                    "Cannot use 'exported_program': the ETRecord has none, or debug handle backpropagation failed "
                    "(some Edge node has no ancestor in it); record it with generate_etrecord(..., "
                    "exported_program=...) or pass disable_debug_handle_valdiation=True"
                )
        if name == "edge_dialect_exported_program":
            program = edge
        elif name == "exported_program":
            program = record.exported_program
        else:
            key = name if "/" in name else f"{name}/{FORWARD}"
            program = (record.graph_map or {}).get(key)
            if program is None:
                raise ValueError(
                    f"Reference graph {key!r} not found; expected 'exported_program', "
                    f"'edge_dialect_exported_program' or one of the graph map's {sorted(record.graph_map or {})}"
                )
        if program is None:
            raise ValueError(f"the ETRecord holds no {name!r} program")
        return program.module(), name

    def _representative_inputs(self) -> Any:
        """The inputs to run the reference graph on: the first input set the ETRecord holds."""
        inputs = self._etrecord._representative_inputs if self._etrecord is not None else None
        if not inputs:
            return None
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        return first if isinstance(first, (list, tuple)) else inputs  # one input set given flat

    def _get_aot_intermediate_outputs_and_op_names(
        self, reference_graph_module: torch.fx.GraphModule
    ) -> tuple[dict[DebugHandle, Any], dict[DebugHandle, list[str]]]:
        """Eager output per debug handle of ``reference_graph_module`` on the representative inputs, and the
        names of the operator nodes per handle."""
        names = get_aot_debug_handle_to_op_name_mapping(reference_graph_module)
        inputs = self._representative_inputs()
        if inputs is None:
            return {}, names
        return IntermediateOutputCapturer(reference_graph_module).run_and_capture(*inputs), names

    def _get_aot_debug_handle_to_stack_traces(
        self, reference_graph_module: torch.fx.GraphModule, resolved_graph_name: str
    ) -> dict[DebugHandle, dict[str, str | None]]:
        """Debug handle -> {operator node name: its stack trace} of the reference graph."""
        wanted = NodeFilter("debug_handle", "call_function", exclude_ops=["getitem"])
        traces: dict[DebugHandle, dict[str, str | None]] = {}
        for node in reference_graph_module.graph.nodes:
            if wanted.matches(node):
                handle = node.meta["debug_handle"]
                key = (handle,) if isinstance(handle, int) else tuple(handle)
                traces.setdefault(key, {})[node.name] = node.meta.get("stack_trace")
        if traces and not any(t for by_node in traces.values() for t in by_node.values()):
            log.warning(
                "The reference graph %r has no stack traces; the 'stacktraces' column holds None. Export with "
                "stack traces kept to see them.",
                resolved_graph_name,
            )
        return traces

    def _get_runtime_intermediate_outputs_and_op_names(
        self,
    ) -> tuple[dict[DebugHandle, tuple[Any, int]], dict[DebugHandle, list[str]]]:
        """The runtime's logged outputs per debug handle, ``(values, number of outputs)``, and the event names.

        Events without operators (OPERATOR_CALL, the runtime's own) or without logged values (a delegate's inner
        operators when only their timings were logged) are skipped; of events with the same
        handles the last instruction's is kept; overlapping handles are merged
        (:func:`merge_runtime_overlapping_debug_handles`). A DELEGATE_CALL is skipped when the same backend
        also logged its inner operators, which cover its handles at a finer grain.
        """
        inner: dict[str | None, set[int]] = {}
        for block in self.event_blocks:
            for event in block.events:
                if event.is_delegated_op and event.op_types and event.debug_data and event.debug_handles is not None:
                    inner.setdefault(event.delegate_backend_name, set()).update(_as_handle(event.debug_handles))
        outputs: dict[DebugHandle, tuple[int, Any, int]] = {}
        names: dict[DebugHandle, list[str]] = {}
        for block in self.event_blocks:
            for event in block.events:
                if event.name in EXCLUDED_EVENTS_FOR_INTERMEDIATE_OUTPUT or not event.op_types or not event.debug_data:
                    continue
                handle = _as_handle(event.debug_handles)
                covered = inner.get(event.delegate_backend_name)
                if event.name == "DELEGATE_CALL" and covered and not covered.isdisjoint(handle):
                    continue
                instruction = event._instruction_id if event._instruction_id is not None else -1
                if instruction > outputs.get(handle, (-1, None, 0))[0]:
                    outputs[handle] = (instruction, event.debug_data, event.num_outputs)
                    names[handle] = [event.name]
        merged = merge_runtime_overlapping_debug_handles(outputs)
        return {handle: (data, count) for handle, (_, data, count) in merged.items()}, names

    def calculate_numeric_gap(
        self,
        distance: Any = "MSE",
        disable_debug_handle_valdiation: bool = False,
        reference_graph: str | None = None,
    ) -> Any:
        """Per runtime operator, the gap between its logged output and the eager output of the nodes it ran.

        Runs the reference graph (see :meth:`_resolve_reference_graph`) on the ETRecord's representative
        inputs in PyTorch, pairs its outputs with the ETDump's intermediate outputs by debug handle
        (:func:`map_runtime_aot_intermediate_outputs`) and compares each pair. ``distance``: ``"MSE"``,
        ``"L1"``, ``"SNR"`` (any case) or a :class:`NumericalComparatorBase`. Returns a DataFrame with
        ``aot_debug_handle, aot_ops, aot_intermediate_output, runtime_ops, runtime_debug_handle,
        runtime_intermediate_output, gap`` and ``stacktraces`` (operator -> its source line).
        """
        from edgetorch.devtools.inspector.numerical_comparator import comparator_for

        module, resolved = self._resolve_reference_graph(reference_graph, disable_debug_handle_valdiation)
        aot, aot_names = self._get_aot_intermediate_outputs_and_op_names(module)
        if not aot or not aot_names:
            raise ValueError(
                "Missing etrecord or missing representative inputs within etrecord, both of which are required "
                "for calculating numerical gap; record them with etrecord.update_representative_inputs(...)"
            )
        traces = self._get_aot_debug_handle_to_stack_traces(module, resolved)
        runtime, runtime_names = self._get_runtime_intermediate_outputs_and_op_names()
        comparator = comparator_for(distance, inspector=self)
        df = comparator.compare(map_runtime_aot_intermediate_outputs(aot, runtime), aot_names, runtime_names)
        trace_of: dict[str, str | None] = {}
        for by_node in traces.values():
            for node_name, trace in by_node.items():
                trace_of.setdefault(node_name, trace)
        if len(df):
            df["stacktraces"] = df["aot_ops"].apply(lambda ops: {op: trace_of.get(op) for op in ops})
        return df


def _entry(event: fe.DebugEvent) -> fe.Value:
    if event.debug_entry is None:
        raise ValueError(f"the ETDump debug event {event.name!r} holds no value; the ETDump is corrupt")
    return event.debug_entry


def _as_handle(handles: int | Sequence[int] | None) -> DebugHandle:
    if handles is None:
        return ()
    return (handles,) if isinstance(handles, int) else tuple(handles)


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


__all__ = [
    "Allocation",
    "DebugEventSignature",
    "DelegateMetadata",
    "Event",
    "EventBlock",
    "EventSignature",
    "Inspector",
    "InstructionEvent",
    "InstructionEventSignature",
    "PerfData",
    "ProfileEventSignature",
    "RunSignature",
    "TimeScale",
    "flatcc",
]
