"""What the Inspector is built from, under ExecuTorch's names: time scales, reading ETDump events, linking them
to Edge nodes, eager outputs by debug handle, and ``compare_results`` (the quality of a run's outputs).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from edgetorch.devtools.extras import figure_class
from edgetorch.errors import InvalidArgumentError
from edgetorch.format import etdump as fe

# A node's or an event's debug handles: one integer per Edge node it covers (a fused or delegated event covers several).
DebugHandle = tuple[int, ...]

OPERATOR_CALL = "OPERATOR_CALL"
# Events of the runtime itself rather than of an instruction: they carry instruction 0's debug handles (as
# ExecuTorch's Inspector links them) but no operator, trace or module of their own.
RESERVED_FRAMEWORK_EVENT_NAMES = ("Method::init", "Program::load_method", "Method::execute")
# Columns the printed table leaves out (they do not fit a terminal).
EXCLUDED_COLUMNS_WHEN_PRINTING = ["raw", "delegate_debug_identifier", "stack_traces", "module_hierarchy", "debug_data"]
EXCLUDED_EVENTS_WHEN_PRINTING = {OPERATOR_CALL}


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


def run_signature(run: fe.RunData) -> tuple:
    """The profile events of a run, by identity: runs with the same signature are merged into one block."""
    return tuple(
        (p.name, p.instruction_id, p.delegate_debug_id_int, p.delegate_debug_id_str)
        for p in (e.profile_event for e in run.events)
        if p is not None
    )


def debug_events(run: fe.RunData) -> list[fe.DebugEvent]:
    return [e.debug_event for e in run.events if e.debug_event is not None]


def is_debug_output(event: fe.DebugEvent) -> bool:
    """Whether a debug event logs a program output (rather than an instruction's value)."""
    entry = event.debug_entry
    return entry is not None and entry.output is not None and bool(entry.output.bool_val)


def lookup(mapping: dict, pc: int | None) -> Any:
    """``mapping[pc]``, whether the ETRecord keyed it by int or by string (as JSON does)."""
    if pc is None:
        return None
    return mapping.get(pc, mapping.get(str(pc)))


# ---------------------------------------------------------------------- eager outputs by debug handle


def aot_outputs(program: Any, inputs: Sequence[Any]) -> dict[int, tuple[list[str], Any]]:
    """Debug handle -> (names of its nodes, output of its last node) from running ``program`` eagerly."""
    outputs: dict[int, tuple[list[str], Any]] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            result = super().run_node(n)
            handle = n.meta.get("debug_handle")
            if n.op == "call_function" and handle is not None:
                names = outputs.get(handle, ([], None))[0]
                outputs[handle] = (
                    [*names, n.target.__name__ if hasattr(n.target, "__name__") else str(n.target)],
                    result,
                )
            return result

    flat = [torch.as_tensor(x) for x in inputs]
    state = {**program.state_dict, **program.constants}
    args = []
    for spec in program.graph_signature.input_specs:
        if spec.target is not None and spec.target in state:
            args.append(state[spec.target])
        else:
            args.append(flat.pop(0))
    with torch.no_grad():
        Capture(program.graph_module).run(*args)
    return outputs


# ---------------------------------------------------------------------- compare_results


def _debug_handles_have_overlap(debug_handle: DebugHandle, target_debug_handle: DebugHandle) -> bool:
    """True when the two handles share at least one Edge node."""
    return not set(debug_handle).isdisjoint(target_debug_handle)


def is_inference_output_equal(output1: Any, output2: Any) -> bool:
    """Whether two recorded outputs are the same: tensors (or lists of tensors) element for element, else ``==``."""
    if isinstance(output1, torch.Tensor) and isinstance(output2, torch.Tensor):
        return torch.equal(output1, output2)
    if isinstance(output1, list) and isinstance(output2, list):
        return len(output1) == len(output2) and all(torch.equal(a, b) for a, b in zip(output1, output2, strict=True))
    return bool(output1 == output2)


def convert_to_float_tensor(input_data: Any) -> torch.Tensor:
    """One value (a scalar, a tensor or an array) as a detached float64 CPU tensor, NaN read as 0.

    A list or tuple is refused: a comparison works on one output at a time.
    """
    if isinstance(input_data, Sequence) and not isinstance(input_data, (str, bytes)):
        raise InvalidArgumentError(
            f"convert_to_float_tensor expects one scalar or tensor, found a {type(input_data).__name__}; "
            "pass its elements one at a time"
        )
    try:
        tensor = torch.as_tensor(input_data, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InvalidArgumentError(
            f"convert_to_float_tensor expects a number or tensor, found {type(input_data).__name__} ({exc})"
        ) from exc
    tensor = tensor.detach().cpu().to(torch.float64)
    return torch.nan_to_num(tensor, nan=0.0) if bool(torch.isnan(tensor).any()) else tensor


def _as_float(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value.detach().to(torch.float64)
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.asarray(value, np.float64))
    return None


def calculate_mse(reference: torch.Tensor, value: torch.Tensor) -> float:
    """Mean of the squared differences."""
    return float(((reference - value) ** 2).mean())


def calculate_snr(reference: torch.Tensor, value: torch.Tensor) -> float:
    """Signal-to-noise ratio in dB: 10·log10(mean(ref²) / mean((ref−value)²)); infinite when they are equal."""
    noise = float(((reference - value) ** 2).mean())
    signal = float((reference**2).mean())
    if noise == 0:
        return math.inf
    return 10 * math.log10(signal / noise) if signal > 0 else -math.inf


def calculate_cosine_similarity(reference: torch.Tensor, value: torch.Tensor) -> float:
    """cos of the angle between the two as flat vectors (1: same direction); 1 for two zero tensors."""
    a, b = reference.flatten(), value.flatten()
    norms = float(a.norm() * b.norm())
    if norms == 0:
        return 1.0 if float(a.norm()) == float(b.norm()) else 0.0
    return float(a @ b) / norms


METRICS: dict[str, Callable[[torch.Tensor, torch.Tensor], float]] = {
    "snr": calculate_snr,
    "mse": calculate_mse,
    "cosine_similarity": calculate_cosine_similarity,
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
