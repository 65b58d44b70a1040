"""Memory-plan views: where each planned tensor of a program lives and over which instructions it is alive.

:func:`memory_timeline` reads a program's plan (from the ``.pte``, so it works on any program, also one
ExecuTorch wrote) into one :class:`PlannedTensor` per planned tensor: memory id, byte offset and size, and
the first and last instruction that touch it. :func:`plot_memory_timeline` draws it as a PNG, one panel per
memory id with each tensor a bar over its instructions at its offset (``edgetorch inspect --memory-plot``);
:func:`generate_memory_trace` writes it as ExecuTorch's Chrome-trace JSON (see
``edgetorch.util.activation_memory_profiler``). Torch-free; the plot needs matplotlib.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from edgetorch.devtools.extras import figure_class
from edgetorch.format import program as fbp
from edgetorch.format.printer import DTYPE_NAMES, instruction_io, preset_values

_SCALAR_BYTES = {
    fbp.ScalarType.BYTE: 1, fbp.ScalarType.CHAR: 1, fbp.ScalarType.BOOL: 1, fbp.ScalarType.SHORT: 2,
    fbp.ScalarType.HALF: 2, fbp.ScalarType.BFLOAT16: 2, fbp.ScalarType.INT: 4, fbp.ScalarType.FLOAT: 4,
    fbp.ScalarType.LONG: 8, fbp.ScalarType.DOUBLE: 8,
}  # fmt: skip


@dataclass(frozen=True)
class PlannedTensor:
    """One planned tensor: value ``value`` of ``method`` lives at ``memory_id``/``offset`` for ``nbytes`` bytes
    from instruction ``first`` to ``last`` (inclusive; an input starts at 0, an output ends at the last one)."""

    method: str
    value: int
    memory_id: int
    offset: int
    nbytes: int
    first: int
    last: int
    shape: tuple[int, ...]
    dtype: str
    producer: str  # the instruction writing it first, or "input", "state" (a buffer), "view" (of another tensor)


def loaded_program(program: Any) -> Any:
    """``program`` as a loaded :class:`edgetorch.runtime.Program`, from a path, bytes, an
    ExecutorchProgramManager or a loaded Program (returned as it is)."""
    from edgetorch.runtime import Program, Runtime

    if isinstance(program, Program):
        return program
    return Runtime.get().load_program(program.buffer if hasattr(program, "buffer") else program)


def execution_plans(program: Any) -> list[fbp.ExecutionPlan]:
    """The execution plans of ``program`` (anything :func:`loaded_program` takes)."""
    return list(loaded_program(program).program.execution_plan)


def memory_timeline(program: Any, method_name: str | None = None) -> list[PlannedTensor]:
    """Every planned tensor of ``method_name`` (all methods when None), in order of value index."""
    found: list[PlannedTensor] = []
    plans = [p for p in execution_plans(program) if method_name is None or p.name == method_name]
    if not plans:
        raise ValueError(f"the program has no method {method_name!r}")
    for plan in plans:
        found.extend(_plan_timeline(plan))
    return found


def expand_lists(plan: fbp.ExecutionPlan, indices: list[int]) -> list[int]:
    """Value indices with each tensor-list value replaced by the tensors it holds (absent optionals left out)."""
    out: list[int] = []
    for i in indices:
        val = plan.values[i].val if 0 <= i < len(plan.values) else None
        if isinstance(val, fbp.TensorList | fbp.OptionalTensorList):
            out.extend(j for j in val.items if j >= 0)
        else:
            out.append(i)
    return out


def _plan_timeline(plan: fbp.ExecutionPlan) -> list[PlannedTensor]:
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    producer: dict[int, str] = {}
    count, defined = 0, preset_values(plan)
    for chain_index, chain in enumerate(plan.chains):
        for k in range(len(chain.instructions)):
            name, reads, writes = instruction_io(plan, chain_index, k, defined)
            for i in expand_lists(plan, writes):
                producer.setdefault(i, name)
            for i in expand_lists(plan, reads) + expand_lists(plan, writes):
                first.setdefault(i, count)
                last[i] = count
            count += 1
    end = max(count - 1, 0)
    inputs, outputs = set(expand_lists(plan, list(plan.inputs))), set(expand_lists(plan, list(plan.outputs)))
    tensors = []
    for i, value in enumerate(plan.values):
        t = value.val
        if not isinstance(t, fbp.Tensor) or t.allocation_info is None:
            continue
        state = bool(t.data_buffer_idx) or t.extra_tensor_info is not None
        if i in inputs or state:
            first[i] = 0
        if i in outputs or state:
            last[i] = end
        if i not in first:
            continue  # planned but never used
        numel = 1
        for s in t.sizes:
            numel *= int(s)
        tensors.append(
            PlannedTensor(
                method=plan.name or "",
                value=i,
                memory_id=int(t.allocation_info.memory_id),
                offset=int(t.allocation_info.memory_offset),
                nbytes=numel * _SCALAR_BYTES.get(t.scalar_type, 1),
                first=first[i],
                last=last.get(i, first[i]),
                shape=tuple(int(s) for s in t.sizes),
                dtype=DTYPE_NAMES.get(t.scalar_type, str(t.scalar_type)),
                producer="input" if i in inputs else "state" if state else producer.get(i, "view"),
            )
        )
    return tensors


def plot_memory_timeline(program: Any, path: str | os.PathLike, method_name: str | None = None) -> None:
    """Save the memory plan as a PNG: one panel per (method, memory id), instruction index across, byte offset
    up, each planned tensor a bar over the instructions it is alive at the bytes it occupies."""
    tensors = memory_timeline(program, method_name)
    if not tensors:
        raise ValueError("the program plans no tensors in memory; there is no plan to plot")
    Figure = figure_class("plot_memory_timeline")
    panels = sorted({(t.method, t.memory_id) for t in tensors})
    fig = Figure(figsize=(10, 3.2 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (method, mem_id) in zip(axes, panels):
        mine = [t for t in tensors if (t.method, t.memory_id) == (method, mem_id)]
        colors = [f"C{t.value % 10}" for t in mine]
        ax.bar(
            [t.first - 0.4 for t in mine],
            [t.nbytes for t in mine],
            width=[t.last - t.first + 0.8 for t in mine],
            bottom=[t.offset for t in mine],
            align="edge",
            color=colors,
            edgecolor="black",
            linewidth=0.5,
            alpha=0.85,
        )
        peak = max(t.offset + t.nbytes for t in mine)
        if len(mine) <= 40:  # label the bars while they are few enough to read, and tall enough to hold a label
            for t in mine:
                if t.nbytes >= 0.04 * peak:
                    ax.text((t.first + t.last) / 2, t.offset + t.nbytes / 2, f"%{t.value}", ha="center",
                            va="center", fontsize=7, clip_on=True)  # fmt: skip
        ax.set_title(f"{method}: memory id {mem_id}, {len(mine)} tensors, {peak} bytes used")
        ax.set_xlabel("instruction")
        ax.set_ylabel("byte offset")
        ax.set_xlim(-0.6, max(t.last for t in mine) + 0.6)
        ax.set_ylim(0, peak * 1.02)
    fig.savefig(path, dpi=100)


def generate_memory_trace(
    executorch_program_manager: Any,
    chrome_trace_filename: str | os.PathLike,
    enable_memory_offsets: bool = False,
    method_name: str = "forward",
    ommit_metadata: bool = False,
) -> None:
    """Write the memory plan of ``method_name`` as Chrome-trace JSON, as ExecuTorch's ``generate_memory_trace``.

    Open it at chrome://tracing or ui.perfetto.dev: a process per memory id, a row per instruction holding the
    tensors alive there, and bytes shown as microseconds (so the "seconds" axis reads megabytes). Rows pack
    the live tensors side by side unless ``enable_memory_offsets`` places each at its planned offset.
    ``executorch_program_manager`` may also be anything :func:`memory_timeline` takes (a path, bytes, ...).
    """
    tensors = memory_timeline(executorch_program_manager, method_name)
    steps = max((t.last for t in tensors), default=-1) + 1
    events: list[dict[str, Any]] = []
    for step in range(steps):
        packed: dict[int, int] = {}
        for t in tensors:
            if not t.first <= step <= t.last:
                continue
            start = t.offset if enable_memory_offsets else packed.get(t.memory_id, 0)
            packed[t.memory_id] = packed.get(t.memory_id, 0) + t.nbytes
            event: dict[str, Any] = {
                "name": f"%{t.value}",
                "cat": "memory",
                "ph": "X",
                "ts": start,
                "dur": t.nbytes,
                "pid": t.memory_id,
                "tid": step,
            }
            if not ommit_metadata:
                event["args"] = {
                    "shape": list(t.shape),
                    "dtype": t.dtype,
                    "bytes": t.nbytes,
                    "offset": t.offset,
                    "producer": t.producer,
                    "alive": f"instructions {t.first}..{t.last}",
                }
            events.append(event)
    with open(chrome_trace_filename, "w") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)
