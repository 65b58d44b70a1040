"""What the Inspector is built from, under ExecuTorch's names: time scales, reading ETDump events, linking them
to Edge nodes, eager outputs by debug handle, and ``compare_results`` (the quality of a run's outputs).
"""

from __future__ import annotations

import enum
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from edgetorch.devtools.debug_format.base_schema import OperatorGraph, OperatorNode
from edgetorch.devtools.debug_format.et_schema import FXOperatorGraph
from edgetorch.devtools.extras import figure_class
from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY, FROM_NODE_KEY, UNSET_DEBUG_HANDLE
from edgetorch.exir.graph_module import bfs_trace_with_node_process
from edgetorch.format import etdump as fe
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY

# A node's or an event's debug handles: one integer per Edge node it covers (a fused or delegated event covers several).
DebugHandle = tuple[int, ...]

OPERATOR_CALL = "OPERATOR_CALL"
FORWARD = "forward"
# The key of the ETRecord's Edge program among the graphs of gen_graphs_from_etrecord (the others are
# "<module>/<method>" of its graph map).
EDGE_DIALECT_GRAPH_KEY = "edge_dialect_graph_module"
# Events of the runtime itself rather than of an instruction: they carry instruction 0's debug handles (as
# ExecuTorch's Inspector links them) but no operator, trace or module of their own.
RESERVED_FRAMEWORK_EVENT_NAMES = ("Method::init", "Program::load_method", "Method::execute")
# Columns the printed table leaves out (they do not fit a terminal).
EXCLUDED_COLUMNS_WHEN_PRINTING = ["raw", "delegate_debug_identifier", "stack_traces", "module_hierarchy", "debug_data"]
EXCLUDED_EVENTS_WHEN_PRINTING = {OPERATOR_CALL}
EXCLUDED_EVENTS_FOR_INTERMEDIATE_OUTPUT = {OPERATOR_CALL}


class TimeScale(enum.StrEnum):
    NS = "ns"
    US = "us"
    MS = "ms"
    S = "s"
    CYCLES = "cycles"


_PER_SECOND = {TimeScale.NS: 1e9, TimeScale.US: 1e6, TimeScale.MS: 1e3, TimeScale.S: 1.0}


def calculate_time_scale_factor(source: TimeScale, target: TimeScale) -> float:
    """How many ``source`` ticks make one ``target`` unit (cycles convert only to cycles, 1:1)."""
    source, target = TimeScale(source), TimeScale(target)
    if (source == TimeScale.CYCLES) != (target == TimeScale.CYCLES):
        raise RuntimeError("For TimeScale in cycles both the source and target time scale have to be in cycles.")
    return 1.0 if source == TimeScale.CYCLES else _PER_SECOND[source] / _PER_SECOND[target]


# ---------------------------------------------------------------------- ETDump events


def gen_etdump_object(etdump_path: str | os.PathLike | None = None, etdump_data: bytes | None = None) -> fe.ETDump:
    """The ETDump in ``etdump_data``, else in the file ``etdump_path``."""
    if etdump_data is None and etdump_path is not None:
        with open(etdump_path, "rb") as f:
            etdump_data = f.read()
    if etdump_data is None:
        raise ValueError("Unable to get ETDump data: pass one of etdump_path and etdump_data")
    return fe.deserialize_etdump(etdump_data)


def is_debug_output(value: fe.Value | None) -> bool:
    """Whether a logged value is a program output (rather than an instruction's value)."""
    return value is not None and value.output is not None and bool(value.output.bool_val)


def _inflate_tensor(tensor: fe.Tensor | None, output_buffer: bytes | None) -> torch.Tensor:
    """A logged tensor read from the debug buffer. Without a buffer, zeros of its dtype and sizes (what
    ExecuTorch's Inspector shows then, so that runs can still be compared by shape)."""
    if tensor is None:
        raise ValueError("a logged tensor value holds no tensor")
    dtype = SCALAR_TO_NUMPY.get(tensor.scalar_type)
    if dtype is None:
        raise ValueError(f"a logged tensor has scalar type {tensor.scalar_type!r}, which has no NumPy dtype")
    sizes = [int(d) for d in tensor.sizes or []]
    count = math.prod(sizes)
    if output_buffer is None or count == 0:  # ExecuTorch stores no bytes (offset -1) for an empty tensor
        return torch.from_numpy(np.zeros(sizes, dtype))
    end = tensor.offset + count * dtype.itemsize
    if tensor.offset < 0 or end > len(output_buffer):
        raise ValueError(
            f"a logged tensor points at bytes {tensor.offset}..{end} of a {len(output_buffer)}-byte debug buffer; "
            "pass the debug buffer written with this ETDump"
        )
    return torch.from_numpy(np.frombuffer(output_buffer, dtype, count, tensor.offset).reshape(sizes).copy())


def inflate_runtime_output(value: fe.Value, output_buffer: bytes | None) -> Any:
    """A logged ETDump value as Python: a tensor, a list of tensors, or a number."""
    if value.val == fe.ValueType.Tensor:
        return _inflate_tensor(value.tensor, output_buffer)
    if value.val == fe.ValueType.TensorList:
        if value.tensor_list is None:
            raise ValueError("expected a tensor list value, found none")
        return [_inflate_tensor(t, output_buffer) for t in value.tensor_list.tensors]
    holder = {
        fe.ValueType.Int: value.int_value,
        fe.ValueType.Bool: value.bool_value,
        fe.ValueType.Float: value.float_value,
        fe.ValueType.Double: value.double_value,
    }.get(value.val)
    if holder is None:
        if value.val in (fe.ValueType.Int, fe.ValueType.Bool, fe.ValueType.Float, fe.ValueType.Double):
            raise ValueError(f"expected a {fe.ValueType(value.val).name} value, found none")
        return None
    return next(iter(vars(holder).values()))


class DebugDataMismatchError(InvalidArgumentError, AssertionError):
    """Runs merged into one event block logged different values; an AssertionError too, as ExecuTorch's
    Inspector asserts it."""


def verify_debug_data_equivalence(existing_data: Sequence[Any], new_data: Sequence[Any]) -> None:
    """Raise :class:`DebugDataMismatchError` unless two runs logged the same values (types, tensors, scalars)."""
    if len(existing_data) != len(new_data):
        raise DebugDataMismatchError(
            f"runs of one event block logged {len(existing_data)} and {len(new_data)} values; expected as many"
        )
    for i, (a, b) in enumerate(zip(existing_data, new_data)):
        if not isinstance(a, type(b)):
            raise DebugDataMismatchError(f"value {i}: a {type(a).__name__} in one run, a {type(b).__name__} in another")
        if isinstance(a, torch.Tensor):
            same = a.shape == b.shape and bool(torch.all(a == b))
        else:
            same = is_inference_output_equal(a, b)
        if not same:
            raise DebugDataMismatchError(
                f"value {i} differs between runs of one event block; the model or runtime is not deterministic"
            )


def find_populated_event(event: fe.Event) -> fe.ProfileEvent | fe.DebugEvent:
    """The profile event an ETDump event holds, else its debug event; ValueError when it holds neither."""
    if event.profile_event is not None:
        return event.profile_event
    if event.debug_event is not None:
        return event.debug_event
    raise ValueError("Unable to find populated event: the ETDump event holds neither a profile nor a debug event")


def lookup(mapping: Mapping, pc: int | None) -> Any:
    """``mapping[pc]``, whether the ETRecord keyed it by int or by string (as JSON does)."""
    if pc is None:
        return None
    return mapping.get(pc, mapping.get(str(pc)))


# ---------------------------------------------------------------------- graphs of an ETRecord


class NodeFilter:
    """Selects FX nodes: ``op`` is ``op_type``, ``meta`` has ``metadata_key`` set, and the node's name contains
    none of ``exclude_ops``."""

    def __init__(self, metadata_key: str, op_type: str, exclude_ops: Sequence[str] | None = None):
        self.metadata_key = metadata_key
        self.op_type = op_type
        self.exclude_ops = list(exclude_ops or [])

    def matches(self, node: torch.fx.Node) -> bool:
        return (
            node.meta.get(self.metadata_key) is not None
            and node.op == self.op_type
            and not any(excluded in node.name for excluded in self.exclude_ops)
        )


def gen_graphs_from_etrecord(etrecord: Any, enable_module_hierarchy: bool = False) -> dict[str, OperatorGraph]:
    """Every program of an ETRecord as an operator graph: its graph map's ``"<module>/<method>"`` entries and
    its Edge program under :data:`EDGE_DIALECT_GRAPH_KEY`."""
    graphs: dict[str, OperatorGraph] = {
        name: FXOperatorGraph.gen_operator_graph(program.graph_module, enable_module_hierarchy=enable_module_hierarchy)
        for name, program in (etrecord.graph_map or {}).items()
    }
    edge = etrecord.edge_dialect_program
    if isinstance(edge, Mapping):
        edge = edge.get(FORWARD)
    if edge is not None:
        graphs[EDGE_DIALECT_GRAPH_KEY] = FXOperatorGraph.gen_operator_graph(
            edge.graph_module, enable_module_hierarchy=enable_module_hierarchy
        )
    return graphs


def create_debug_handle_to_op_node_mapping(op_graph: OperatorGraph) -> dict[int, list[OperatorNode]]:
    """Debug handle -> the operator nodes of ``op_graph`` (and of its subgraphs, depth first) that carry it.

    A handle of the user's exported graph can cover several Edge nodes (a decomposed operator), hence a list.
    """
    mapping: dict[int, list[OperatorNode]] = {}

    def visit(graph: OperatorGraph) -> None:
        for element in graph.elements:
            if isinstance(element, OperatorGraph):
                visit(element)
            elif isinstance(element, OperatorNode) and element.metadata is not None:
                handle = element.metadata.get(DEBUG_HANDLE_KEY)
                if handle is not None:
                    mapping.setdefault(handle, []).append(element)

    visit(op_graph)
    return mapping


def get_aot_debug_handle_to_op_name_mapping(graph_module: torch.fx.GraphModule) -> dict[DebugHandle, list[str]]:
    """Debug handle (as a tuple) -> names of the operator calls of ``graph_module`` that carry it, ``getitem``
    nodes left out (they select an output; they compute nothing)."""
    wanted = NodeFilter(DEBUG_HANDLE_KEY, "call_function", exclude_ops=["getitem"])
    names: dict[DebugHandle, list[str]] = {}
    for node in graph_module.graph.nodes:
        if wanted.matches(node):
            handle = node.meta[DEBUG_HANDLE_KEY]
            key = (handle,) if isinstance(handle, int) else tuple(handle)
            names.setdefault(key, []).append(node.name)
    return names


def find_op_names(
    target_debug_handle: DebugHandle, debug_handle_to_op_names: Mapping[DebugHandle, list[str]]
) -> list[str]:
    """The operator names of every entry whose handles all lie within ``target_debug_handle``, in map order."""
    target = set(target_debug_handle)
    return [name for key, names in debug_handle_to_op_names.items() if set(key) <= target for name in names]


# ---------------------------------------------------------------------- compare_results


def _debug_handles_have_overlap(debug_handle: DebugHandle, target_debug_handle: DebugHandle) -> bool:
    """True when the two handles share at least one Edge node."""
    return not set(debug_handle).isdisjoint(target_debug_handle)


# A runtime intermediate output: (instruction id, logged value, number of outputs of the instruction).
RuntimeOutput = tuple[int, Any, int]


def _join_handles(earlier: DebugHandle, later: DebugHandle) -> DebugHandle:
    """The handles of two overlapping instructions as one: ``earlier``'s that ``later`` lacks, then ``later``'s
    (each once)."""
    later_set = set(later)
    joined = [h for h in earlier if h not in later_set]
    return (*joined, *dict.fromkeys(h for h in later if h not in set(joined)))


def merge_runtime_overlapping_debug_handles(
    runtime_intermediate_outputs: Mapping[DebugHandle, RuntimeOutput],
) -> dict[DebugHandle, RuntimeOutput]:
    """Instructions whose debug handles overlap, merged into one entry.

    Runtime events can share Edge nodes (a decomposed operator runs as several kernels; a delegate covers
    several nodes). Overlapping handles become one key, the earlier instruction's handles first; the entry keeps
    the value of the instruction with the highest id, the last to write the shared result.
    """
    merged: dict[DebugHandle, RuntimeOutput] = {}
    for handle, value in runtime_intermediate_outputs.items():
        key, kept = handle, value
        for other in [k for k in merged if not set(k).isdisjoint(handle)]:
            other_value = merged.pop(other)
            if other_value[0] < value[0]:
                key = _join_handles(other, key)
            else:
                key, kept = _join_handles(key, other), other_value
        merged[key] = kept
    return merged


def _overlap_components(
    aot: Mapping[DebugHandle, Any], runtime: Mapping[DebugHandle, tuple[Any, int]]
) -> list[tuple[list[tuple[DebugHandle, Any]], list[tuple[DebugHandle, Any, int]]]]:
    """Group AOT and runtime outputs that are linked through shared debug handles (an AOT output and a runtime
    output are linked when their handles overlap; two of the same side only through the other side)."""
    nodes: list[tuple[bool, DebugHandle, Any, int]] = [(True, h, v, 1) for h, v in aot.items()]
    nodes += [(False, h, v[0], v[1]) for h, v in runtime.items()]
    neighbours: list[list[int]] = [[] for _ in nodes]
    for i, (side_i, handle_i, _, _) in enumerate(nodes):
        for j in range(i + 1, len(nodes)):
            if side_i != nodes[j][0] and _debug_handles_have_overlap(handle_i, nodes[j][1]):
                neighbours[i].append(j)
                neighbours[j].append(i)
    seen = [False] * len(nodes)
    components = []
    for start in range(len(nodes)):
        if seen[start]:
            continue
        order, stack = [], [start]
        seen[start] = True
        while stack:  # depth first, neighbours in order, as a recursive walk would visit them
            node = stack.pop()
            order.append(node)
            for n in reversed(neighbours[node]):
                if not seen[n]:
                    seen[n] = True
                    stack.append(n)
        components.append(
            (
                [(nodes[i][1], nodes[i][2]) for i in order if nodes[i][0]],
                [(nodes[i][1], nodes[i][2], nodes[i][3]) for i in order if not nodes[i][0]],
            )
        )
    return components


def _runtime_output_like(aot_output: torch.Tensor, runtime_outputs: Sequence[Any]) -> Any:
    """The one of an instruction's several outputs that matches the AOT output by shape (then dtype); the last
    when none or several do (a ``native_layer_norm`` logs its mean and rstd too, a dropout its mask)."""
    same_shape = [t for t in runtime_outputs if isinstance(t, torch.Tensor) and t.shape == aot_output.shape]
    if len(same_shape) == 1:
        return same_shape[0]
    same_dtype = [t for t in same_shape if t.dtype == aot_output.dtype]
    return same_dtype[0] if len(same_dtype) == 1 else runtime_outputs[-1]


def _pair_output(
    aot: list[tuple[DebugHandle, Any]], runtime_handle: DebugHandle, runtime_output: Any, num_outputs: int, index: int
) -> tuple[tuple[DebugHandle, Any], tuple[DebugHandle, Any]] | None:
    """The ``index``-th output counted from the end of a runtime instruction, paired with the AOT output of the
    node whose handle sits at that place in the runtime handles; None when the AOT side has no such node or
    holds handles the runtime side lacks."""
    from_end = -(index + 1)
    by_handle = dict(aot)
    if not {h for key in by_handle for h in key} <= set(runtime_handle):
        return None
    key = (runtime_handle[from_end],)
    if key not in by_handle:
        return None
    aot_output = by_handle[key]
    if isinstance(aot_output, Sequence) and not isinstance(aot_output, (str, bytes)):
        if not isinstance(runtime_output, Sequence):
            raise TypeError("the runtime output must be a sequence when the AOT output is one")
        last = runtime_output[from_end]
        matched: Any
        if isinstance(last, list) and all(isinstance(t, torch.Tensor) for t in last):
            matched = last
        elif isinstance(last, torch.Tensor):
            matched = runtime_output
        else:
            raise ValueError(
                "when the AOT output is a sequence, the runtime output's entries must be tensors or lists of "
                f"tensors; found {type(last).__name__}"
            )
        return (runtime_handle, tuple(aot_output)), (runtime_handle, tuple(matched))
    if not isinstance(runtime_output, Sequence) or isinstance(runtime_output, (str, bytes)):
        return (runtime_handle, aot_output), (runtime_handle, runtime_output)
    matched = runtime_output[from_end]
    if num_outputs == 1 and len(runtime_output) > 1 and isinstance(aot_output, torch.Tensor):
        matched = _runtime_output_like(aot_output, runtime_output)
    return (runtime_handle, aot_output), (runtime_handle, matched)


def map_runtime_aot_intermediate_outputs(
    aot_intermediate_outputs: Mapping[DebugHandle, Any],
    runtime_intermediate_outputs: Mapping[DebugHandle, tuple[Any, int]],
) -> dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]]:
    """Pair eager (AOT) intermediate outputs with runtime ones: ``(handles, aot output) -> (handles, runtime
    output)``, both keyed by the runtime instruction's handles.

    AOT handles name one node each; runtime handles (already merged with
    :func:`merge_runtime_overlapping_debug_handles`) one instruction, which may cover several nodes. Each
    group linked through shared handles must hold one runtime instruction; its outputs, counted from the last,
    pair with the nodes its handles list from the last (a delegate logs one output per node it ends with).
    """
    pairs: dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]] = {}
    for aot, runtime in _overlap_components(aot_intermediate_outputs, runtime_intermediate_outputs):
        if not aot or not runtime:
            continue
        if len(runtime) != 1:
            raise ValueError(
                f"expected one runtime instruction per group of overlapping debug handles, found {len(runtime)}: "
                f"{[r[0] for r in runtime]}; merge them first with merge_runtime_overlapping_debug_handles"
            )
        handle, output, num_outputs = runtime[0]
        for index in range(num_outputs):
            pair = _pair_output(aot, handle, output, num_outputs, index)
            if pair is not None:
                pairs[pair[0]] = pair[1]
    return pairs


def is_inference_output_equal(output1: Any, output2: Any) -> bool:
    """Whether two recorded outputs are the same: tensors (or lists of tensors) element for element, else ``==``."""
    if isinstance(output1, torch.Tensor) and isinstance(output2, torch.Tensor):
        return torch.equal(output1, output2)
    if isinstance(output1, list) and isinstance(output2, list):
        return len(output1) == len(output2) and all(torch.equal(a, b) for a, b in zip(output1, output2, strict=True))
    return bool(output1 == output2)


class NotOneValueError(InvalidArgumentError, AssertionError):
    """A list or tuple where one value was expected; an AssertionError too, as ExecuTorch's
    ``convert_to_float_tensor`` asserts it."""


def convert_to_float_tensor(input_data: Any) -> torch.Tensor:
    """One value (a scalar, a tensor or an array) as a detached float64 CPU tensor, NaN read as 0.

    A list or tuple is refused: a comparison works on one output at a time.
    """
    if isinstance(input_data, Sequence) and not isinstance(input_data, (str, bytes)):
        raise NotOneValueError(
            f"convert_to_float_tensor expects one scalar or tensor, found a {type(input_data).__name__}; "
            "pass its elements one at a time"
        )
    try:
        tensor = torch.as_tensor(input_data, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InvalidArgumentError(
            f"Cannot convert value of type {type(input_data).__name__} to a tensor ({exc}); "
            "convert_to_float_tensor expects a number or tensor"
        ) from exc
    tensor = tensor.detach().cpu().to(torch.float64)
    return torch.nan_to_num(tensor, nan=0.0) if bool(torch.isnan(tensor).any()) else tensor


def _as_float(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.asarray(value, np.float64))
    return None


def _mse(reference: torch.Tensor, value: torch.Tensor) -> float:
    """Mean of the squared differences."""
    return float(((reference - value) ** 2).mean())


def _snr(reference: torch.Tensor, value: torch.Tensor) -> float:
    """Signal-to-noise ratio in dB: 10·log10(mean(ref²) / mean((ref−value)²)); infinite when they are equal."""
    noise = float(((reference - value) ** 2).mean())
    signal = float((reference**2).mean())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def _cosine_similarity(reference: torch.Tensor, value: torch.Tensor) -> float:
    """cos of the angle between the two as flat vectors (1: same direction); 1 for two zero tensors."""
    a, b = reference.flatten(), value.flatten()
    norms = float(a.norm() * b.norm())
    if norms == 0:
        return 1.0 if float(a.norm()) == float(b.norm()) else 0.0
    return float(a @ b) / norms


def _per_pair(
    metric: Callable[[torch.Tensor, torch.Tensor], float], ref_values: Sequence[Any], values: Sequence[Any]
) -> list[float | None]:
    """ExecuTorch's list form of a metric: one value per (reference, value) pair of tensors, rounded to two
    decimals as its Inspector reports them; None for a pair that is not two tensors."""
    results: list[float | None] = []
    for ref, value in zip(ref_values, values):
        a, b = _as_float(ref), _as_float(value)
        if a is None or b is None or not isinstance(ref, torch.Tensor) or not isinstance(value, torch.Tensor):
            results.append(None)
            continue
        if a.shape != b.shape:
            raise ValueError(f"the reference has shape {list(a.shape)}, the value {list(b.shape)}: expected equal")
        results.append(round(metric(a, b), 2))
    return results


def calculate_mse(ref_values: Sequence[Any], values: Sequence[Any]) -> list[float | None]:
    """Mean squared error of each pair of tensors (see :func:`_per_pair`)."""
    return _per_pair(_mse, ref_values, values)


def calculate_snr(ref_values: Sequence[Any], values: Sequence[Any]) -> list[float | None]:
    """Signal-to-noise ratio (dB) of each pair of tensors (see :func:`_per_pair`)."""
    return _per_pair(_snr, ref_values, values)


def calculate_cosine_similarity(ref_values: Sequence[Any], values: Sequence[Any]) -> list[float | None]:
    """Cosine similarity of each pair of tensors (see :func:`_per_pair`)."""
    return _per_pair(_cosine_similarity, ref_values, values)


METRICS: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
    "snr": _snr,
    "mse": _mse,
    "cosine_similarity": _cosine_similarity,
}


def compare_results(
    reference_output: Sequence[Any], run_output: Sequence[Any], metrics: list[str] | None = None, plot: bool = False
) -> dict[str, list[float | None]]:
    """The quality of each run output against its reference: ``snr`` (dB), ``mse``, ``cosine_similarity``.

    Returns metric -> one value per (reference, run) pair, in float64 and unrounded; a pair that is not two
    tensors (a scalar output) gets None. Prints each metric's values; ``plot=True`` saves a bar chart per
    metric to ``<metric>_output_plot.png`` instead (matplotlib needed), as ExecuTorch's ``compare_results``.
    """
    chosen = list(METRICS) if metrics is None else list(metrics)
    unknown = [m for m in chosen if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; choose from {list(METRICS)}")
    if len(reference_output) != len(run_output):
        raise ValueError(
            f"compare_results needs one run output per reference output: got {len(reference_output)} references "
            f"and {len(run_output)} run outputs"
        )
    pairs = []
    for i, (ref, got) in enumerate(zip(reference_output, run_output)):
        a, b = _as_float(ref), _as_float(got)
        if a is not None and b is not None and a.shape != b.shape:
            raise ValueError(f"output {i}: the reference has shape {list(a.shape)}, the run output {list(b.shape)}")
        pairs.append((a, b))
    results = {
        metric: [None if a is None or b is None else METRICS[metric](a, b) for a, b in pairs] for metric in chosen
    }
    for metric, values in results.items():
        if plot:
            _plot_metric(metric, values)
        else:
            print(metric)
            print("-" * 20)
            for i, value in enumerate(values):
                print(f"{i:<5}{'n/a' if value is None else format(value, '.6g'):>12}")
    return results


def _plot_metric(metric: str, values: list[float | None]) -> None:
    fig = figure_class("compare_results(plot=True)")(figsize=(8, 6))
    ax = fig.subplots()
    shown = [0.0 if v is None or not math.isfinite(v) else v for v in values]
    bars = ax.bar(range(len(shown)), shown, width=0.5)
    for bar, value in zip(bars, values):
        ax.annotate("n/a" if value is None else f"{value:.4g}", (bar.get_x() + bar.get_width() / 2, bar.get_height()))
    ax.set_xlabel("Output value index")
    ax.set_ylabel(metric)
    ax.set_title(f"Metric {metric}")
    ax.grid(True, axis="y")
    fig.savefig(f"{metric}_output_plot.png")


# ---------------------------------------------------------------------- debug handles back onto the exported graph


def get_ancestor_node_identifiers(node: torch.fx.Node) -> list[str]:
    """``"<name>.<graph id>"`` of every node ``node`` descends from (torch's ``from_node`` record), nearest
    first; empty when torch recorded none."""
    sources = node.meta.get(FROM_NODE_KEY)
    if not sources:
        return []
    source = sources[-1]
    identifiers = [f"{source.name}.{source.graph_id}"]
    while source.from_node:
        source = source.from_node[-1]
        identifiers.append(f"{source.name}.{source.graph_id}")
    return identifiers


def get_parent_node_identifier(node: torch.fx.Node) -> str | None:
    """``"<name>.<graph id>"`` of the node ``node`` was made from; None when torch recorded none."""
    sources = node.meta.get(FROM_NODE_KEY)
    return f"{sources[-1].name}.{sources[-1].graph_id}" if sources else None


def _computes(node: torch.fx.Node) -> bool:
    return node.op not in ("placeholder", "output")


def _has_handle(node: torch.fx.Node) -> bool:
    """An Edge node that computes and carries a debug handle (a node a pass added late may carry none)."""
    return _computes(node) and node.meta.get(DEBUG_HANDLE_KEY) is not None


def propagate_back_debug_handle(
    exported_program: Any,
    exported_program_graph_id: int,
    edge_dialect_program: Any,
    disable_debug_handle_valdiation: bool = False,
) -> bool:
    """Give the nodes of the user's exported program the debug handles of the Edge nodes made from them.

    An exported node gets the handle of the Edge nodes that descend from it (by torch's ``from_node`` record;
    ``exported_program_graph_id`` is ``id(exported_program.graph)`` at export time), or from its nearest
    recorded ancestor; a node with no Edge descendant (``to_edge`` removed it) gets ``UNSET_DEBUG_HANDLE``.
    Returns False, changing nothing, when some Edge handle has no exported node (the programs do not belong
    together), unless ``disable_debug_handle_valdiation`` (ExecuTorch's spelling) is set.
    """
    handle_of: dict[str, int] = {}

    def record(node: torch.fx.Node) -> None:
        if not _has_handle(node):
            return
        for identifier in get_ancestor_node_identifiers(node):
            known = handle_of.setdefault(identifier, node.meta[DEBUG_HANDLE_KEY])
            if known != node.meta[DEBUG_HANDLE_KEY]:
                raise ValueError(
                    f"Edge nodes descending from {identifier} carry debug handles {known} and "
                    f"{node.meta[DEBUG_HANDLE_KEY]}; expected one handle per exported node"
                )

    bfs_trace_with_node_process(edge_dialect_program.graph_module, record)

    def handle_for(node: torch.fx.Node) -> int | None:
        own = f"{node.name}.{exported_program_graph_id}"
        if own in handle_of:
            return handle_of[own]
        return next((handle_of[i] for i in get_ancestor_node_identifiers(node) if i in handle_of), None)

    matched: set[int] = set()

    def match(node: torch.fx.Node) -> None:
        if _computes(node) and (handle := handle_for(node)) is not None:
            matched.add(handle)

    bfs_trace_with_node_process(exported_program.graph_module, match)
    unmatched: list[int] = []

    def check(node: torch.fx.Node) -> None:
        if _has_handle(node) and node.meta[DEBUG_HANDLE_KEY] not in matched:
            unmatched.append(node.meta[DEBUG_HANDLE_KEY])

    if not disable_debug_handle_valdiation:
        bfs_trace_with_node_process(edge_dialect_program.graph_module, check)
        if unmatched:
            return False

    def equip(node: torch.fx.Node) -> None:
        if _computes(node):
            handle = handle_for(node)
            node.meta[DEBUG_HANDLE_KEY] = UNSET_DEBUG_HANDLE if handle is None else handle

    bfs_trace_with_node_process(exported_program.graph_module, equip)
    return True
