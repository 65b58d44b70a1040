"""``find_divergence``: the first operator whose runtime output differs from PyTorch eager, in one call.

It lowers the exported program with an ETRecord (or takes a lowered one),
runs it in edgetorch's runtime logging every intermediate output, runs the
Edge program eagerly on the same inputs, and compares the two operator by
operator in execution order. The report names the first operator beyond
tolerance with its source line, and holds the gap of every operator.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgetorch.devtools.extras import figure_class
from edgetorch.devtools.inspector import Event, EventBlock, Inspector
from edgetorch.devtools.inspector._inspector_utils import OPERATOR_CALL
from edgetorch.devtools.inspector._intermediate_output_capturer import IntermediateOutputCapturer
from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime


@dataclass
class Divergence:
    """One operator's comparison: Edge operators, the largest absolute difference, where it comes from."""

    instruction: int
    op_types: list[str]
    max_abs_diff: float
    allowed: float
    source: str = ""

    @property
    def diverges(self) -> bool:
        return not self.max_abs_diff <= self.allowed


@dataclass
class DivergenceReport:
    rows: list[Divergence] = field(default_factory=list)

    @property
    def first(self) -> Divergence | None:
        """The first operator (in execution order) whose output is beyond tolerance, or None."""
        return next((r for r in self.rows if r.diverges), None)

    def plot(self, path: str | os.PathLike) -> None:
        """Save the gap along the graph as a PNG: each compared operator's largest difference (log scale)
        against its tolerance, in execution order, the diverging ones in red and the first one named."""
        if not self.rows:
            raise ValueError("the report compares no operator; there is nothing to plot")
        Figure = figure_class("DivergenceReport.plot")
        fig = Figure(figsize=(10, 4), layout="constrained")
        ax = fig.subplots()
        x = [r.instruction for r in self.rows]
        floor = min([r.allowed for r in self.rows] + [r.max_abs_diff for r in self.rows if r.max_abs_diff > 0]) / 10
        y = [max(r.max_abs_diff, floor) for r in self.rows]  # exact matches sit on the floor of the log axis
        ax.plot(x, y, color="0.6", linewidth=1, zorder=1)
        ax.scatter(x, y, c=["tab:red" if r.diverges else "tab:green" for r in self.rows], s=24, zorder=2)
        ax.step(x, [r.allowed for r in self.rows], where="mid", color="tab:blue", linestyle="--", label="tolerance")
        ax.set_yscale("log")
        ax.set_xlabel("instruction")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("max |runtime - eager|")
        first = self.first
        title = "no operator diverges" if first is None else f"first divergence: instruction {first.instruction}"
        if first is not None:
            ax.annotate(", ".join(first.op_types)[:60], (first.instruction, max(first.max_abs_diff, floor)),
                        xytext=(8, -12), textcoords="offset points", fontsize=8, color="tab:red")  # fmt: skip
        ax.set_title(title)
        ax.legend(loc="upper left")
        fig.savefig(path, dpi=100)

    def __str__(self) -> str:
        lines = [f"{'instr':>5}  {'max |diff|':>11}  {'ok':>3}  operators"]
        for r in self.rows:
            mark = "no" if r.diverges else "yes"
            lines.append(f"{r.instruction:>5}  {r.max_abs_diff:>11.3g}  {mark:>3}  {', '.join(r.op_types)}")
        first = self.first
        if first is None:
            lines.append("no operator diverges")
        else:
            lines.append(f"first divergence: instruction {first.instruction} ({', '.join(first.op_types)})")
            if first.source:
                lines.append(first.source)
        return "\n".join(lines)


def find_divergence(
    exported_program: torch.export.ExportedProgram,
    inputs: tuple,
    program: Any = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
) -> DivergenceReport:
    """Compare eager and runtime outputs of every operator of ``exported_program`` on ``inputs``.

    ``program`` is an ExecutorchProgramManager made with ``generate_etrecord=True``; by default the
    exported program is lowered with ``to_edge(..., generate_etrecord=True)``.
    """
    if program is None:
        program = to_edge(exported_program, generate_etrecord=True).to_executorch()
    record = program.get_etrecord()
    with tempfile.TemporaryDirectory() as tmp:
        etdump, buffer = Path(tmp) / "run.etdp", Path(tmp) / "run.bin"
        loaded = Runtime.get().load_program(program.buffer, enable_etdump=True, debug_buffer_size=1 << 31)
        loaded.load_method("forward").execute([np.asarray(x) for x in inputs])
        loaded.write_etdump_result_to_file(etdump, buffer)
        inspector = Inspector(etdump_path=str(etdump), etrecord=record, debug_buffer_path=str(buffer))
    eager = eager_outputs(inspector.get_exported_program(), inputs)
    report = DivergenceReport()
    for block in inspector.event_blocks:
        for event, known in compared_events(block, eager):
            reference = eager[known[-1]]
            reference = reference[0] if isinstance(reference, (list, tuple)) else reference
            got = event.debug_data[0].reshape(reference.shape).double()
            want = reference.double()
            diff = float((got - want).abs().max()) if want.numel() else 0.0
            allowed = atol + rtol * float(want.abs().max()) if want.numel() else atol
            source = next((trace for trace in event.stack_traces.values() if trace), "")
            instruction = event._instruction_id if event._instruction_id is not None else -1
            report.rows.append(Divergence(instruction, event.op_types, diff, allowed, source))
    return report


def eager_outputs(program: torch.export.ExportedProgram, inputs: tuple) -> dict[int, Any]:
    """Debug handle -> the eager output of the last node with that handle (one handle per Edge node group)."""
    captured = IntermediateOutputCapturer(program.module()).run_and_capture(*[torch.as_tensor(x) for x in inputs])
    return {key[0]: value for key, value in captured.items() if len(key) == 1}


def compared_events(block: EventBlock, eager: dict[int, Any]) -> list[tuple[Event, list[int]]]:
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
        known = [h for h in handles if h in eager]
        if known:
            candidates.append((event, known))
    last = {tuple(sorted(known)): i for i, (_, known) in enumerate(candidates)}
    return [c for i, c in enumerate(candidates) if last[tuple(sorted(c[1]))] == i]
