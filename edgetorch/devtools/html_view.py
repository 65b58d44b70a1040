"""A program as one self-contained HTML page: its graph, operators, delegates, tensor shapes and memory offsets.

:func:`program_to_html` draws each method as an SVG graph (inputs, one box per instruction, outputs; an arrow
per tensor from the instruction that writes it to those that read it; delegate calls highlighted; hover a
box for its full signature), then lists every instruction with the shape, dtype and planned place (memory
id and byte offset) of each value it reads and writes, the delegates with their compile specs, and the
planned memory ids. Everything is inline (CSS and SVG, no scripts, no network assets), so the file opens
anywhere. ``edgetorch inspect model.pte --html out.html`` writes it. Torch-free.
"""

from __future__ import annotations

import html
import os
from collections import Counter
from typing import Any

from edgetorch.devtools.memory_plan import expand_lists, loaded_program
from edgetorch.errors import EdgetorchError
from edgetorch.format import program as fbp
from edgetorch.format.printer import describe_tensor, describe_value, instruction_io, preset_values

_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _MARGIN = 230, 46, 30, 38, 20
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #1d2330; background: #fafbfc; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 2px solid #d0d7e2; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #d0d7e2; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #e8edf5; } td.num { text-align: right; } code { font-size: 12px; }
.graph { overflow: auto; border: 1px solid #d0d7e2; background: white; margin: 8px 0 16px; }
.kernel rect { fill: #dbe8fb; stroke: #3d6fb6; } .delegate rect { fill: #ffe2bf; stroke: #d07a12; stroke-width: 2; }
.other rect { fill: #eceff3; stroke: #7b8494; } .io ellipse { fill: #d9f2de; stroke: #2f8a47; }
svg text { font-size: 11px; fill: #1d2330; } .edge { stroke: #8a93a3; fill: none; stroke-width: 1.2; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 8px; border-radius: 4px; font-size: 12px; }
"""


def program_to_html(program: Any, title: str = "program") -> str:
    """The HTML page for ``program`` (a path, bytes, a loaded runtime Program, a format Program or an
    ExecutorchProgramManager)."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<p class='legend'><span style='background:#dbe8fb'>kernel</span>"
        "<span style='background:#ffe2bf'>delegate</span><span style='background:#eceff3'>move / control</span>"
        "<span style='background:#d9f2de'>input / output</span></p>",
    ]
    loaded = loaded_program(program)
    for plan in loaded.program.execution_plan:
        parts.append(_method(plan, [_delegate_nodes(loaded, plan, i) for i in range(len(plan.delegates))]))
    parts.append("</body></html>")
    return "\n".join(parts)


def save_program_html(program: Any, path: str | os.PathLike, title: str | None = None) -> None:
    """Write :func:`program_to_html` of ``program`` to ``path``."""
    text = program_to_html(
        program, title or (os.fspath(program) if isinstance(program, str | os.PathLike) else "program")
    )
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _tensor_text(plan: fbp.ExecutionPlan, index: int) -> str:
    val = plan.values[index].val if 0 <= index < len(plan.values) else None
    return (
        f"%{index}: {describe_tensor(val)}"
        if isinstance(val, fbp.Tensor)
        else f"%{index}: {describe_value(plan, index)}"
    )


def _delegate_nodes(loaded: Any, plan: fbp.ExecutionPlan, index: int) -> str:
    """What a delegate runs, when its blob can be read: ``XNNConv2d x3, XNNClamp x2, ...`` for XNNPACK."""
    delegate = plan.delegates[index]
    if delegate.id != "XnnpackBackend":
        return ""
    from edgetorch.backends.xnnpack.blob import parse_blob

    try:
        graph = parse_blob(loaded.delegate_data(delegate.processed, f"delegate {index}")).graph
    except EdgetorchError as e:
        return f"(blob unreadable: {e})"
    counts = Counter(type(node.xnode_union).__name__ for node in graph.xnodes)
    return f"{len(graph.xnodes)} XNNPACK nodes: " + ", ".join(f"{name} x{n}" for name, n in counts.most_common())


def _method(plan: fbp.ExecutionPlan, delegate_nodes: list[str]) -> str:
    name = plan.name or ""
    # one per input, instruction and output: (kind "io"/"ins", css class, label, second line, tooltip)
    nodes: list[tuple[str, str, str, str, str]] = []
    edges: list[tuple[int, int]] = []
    writer: dict[int, int] = {}  # value -> the node that wrote it
    last_at: dict[tuple[int, int], int] = {}  # (memory id, offset) -> the node that wrote there last
    rows = []
    for i in plan.inputs:
        writer[i] = len(nodes)
        if (spot := _spot(plan, i)) is not None:
            last_at[spot] = len(nodes)
        nodes.append(("io", "io", f"input %{i}", _place(plan, i), _tensor_text(plan, i)))
    defined = preset_values(plan)
    k = 0
    for c, chain in enumerate(plan.chains):
        for j in range(len(chain.instructions)):
            op, reads, writes = instruction_io(plan, c, j, defined)
            kind = type(chain.instructions[j].instr_args)
            css = "kernel" if kind is fbp.KernelCall else "delegate" if kind is fbp.DelegateCall else "other"
            node = len(nodes)
            srcs = sorted(
                {n for v in expand_lists(plan, reads) if (n := _source(plan, v, writer, last_at)) is not None}
            )
            edges.extend((s, node) for s in srcs)
            args = chain.instructions[j].instr_args
            runs = delegate_nodes[args.delegate_index] if kind is fbp.DelegateCall else ""
            tip = f"#{k} {op}" + (f" ({runs})" if runs else "")
            tip += "\nreads: " + ", ".join(_tensor_text(plan, v) for v in reads)
            tip += "\nwrites: " + ", ".join(_tensor_text(plan, v) for v in writes)
            first = next(iter(expand_lists(plan, writes)), None)
            nodes.append(("ins", css, f"#{k} {op}", "" if first is None else _place(plan, first), tip))
            for v in expand_lists(plan, writes):
                writer[v] = node
                if (spot := _spot(plan, v)) is not None:
                    last_at[spot] = node
            rows.append(
                f"<tr><td class='num'>{k}</td><td><code>{html.escape(op)}</code></td>"
                f"<td>{'<br>'.join(html.escape(_tensor_text(plan, v)) for v in reads)}</td>"
                f"<td>{'<br>'.join(html.escape(_tensor_text(plan, v)) for v in writes)}</td></tr>"
            )
            k += 1
    for i in plan.outputs:
        node = len(nodes)
        if (source := _source(plan, i, writer, last_at)) is not None:
            edges.append((source, node))
        nodes.append(("io", "io", f"output %{i}", _place(plan, i), _tensor_text(plan, i)))

    out = [f"<h2>method <code>{html.escape(name)}</code></h2>"]
    out.append(f"<p>{len(plan.inputs)} inputs, {len(plan.outputs)} outputs, {k} instructions, "
               f"{len(plan.values)} values, {len(plan.delegates)} delegates</p>")  # fmt: skip
    out.append(_svg(nodes, edges, n_inputs=len(plan.inputs)))
    out.append("<table><tr><th>memory id</th><th>planned bytes</th></tr>")
    for mem_id, size in enumerate(plan.non_const_buffer_sizes):
        if mem_id:
            out.append(f"<tr><td class='num'>{mem_id}</td><td class='num'>{int(size)}</td></tr>")
    out.append("</table>")
    if plan.delegates:
        out.append("<table><tr><th>#</th><th>backend</th><th>blob</th><th>compile specs</th><th>runs</th></tr>")
        for d_index, d in enumerate(plan.delegates):
            where = "inline" if d.processed is not None and int(d.processed.location) == 0 else "segment"
            index = d.processed.index if d.processed is not None else "?"
            specs = ", ".join(f"{html.escape(s.key or '')} ({len(s.value)} bytes)" for s in d.compile_specs)
            out.append(f"<tr><td class='num'>{d_index}</td><td>{html.escape(d.id or '')}</td>"
                       f"<td>{where} {index}</td><td>{specs or '-'}</td>"
                       f"<td>{html.escape(delegate_nodes[d_index]) or '-'}</td></tr>")  # fmt: skip
        out.append("</table>")
    out.append(
        "<table><tr><th>#</th><th>instruction</th><th>reads</th><th>writes (shape, dtype, memory id @ offset)</th></tr>"
    )
    out.extend(rows)
    out.append("</table>")
    return "\n".join(out)


def _spot(plan: fbp.ExecutionPlan, index: int) -> tuple[int, int] | None:
    val = plan.values[index].val if 0 <= index < len(plan.values) else None
    if isinstance(val, fbp.Tensor) and val.allocation_info is not None:
        return val.allocation_info.memory_id, val.allocation_info.memory_offset
    return None


def _source(
    plan: fbp.ExecutionPlan, index: int, writer: dict[int, int], last_at: dict[tuple[int, int], int]
) -> int | None:
    """The node a read value comes from: its writer, or for a view no instruction writes (a reshape the
    emitter made an alias) the last node that wrote the planned memory it reads."""
    if index in writer:
        return writer[index]
    spot = _spot(plan, index)
    return None if spot is None else last_at.get(spot)


def _place(plan: fbp.ExecutionPlan, index: int) -> str:
    """A box's second line: ``1x8x14x14 f32 @ 1+6272`` (shape, dtype, memory id + offset when planned)."""
    val = plan.values[index].val if 0 <= index < len(plan.values) else None
    if not isinstance(val, fbp.Tensor):
        return describe_value(plan, index)
    where, _, shape = describe_tensor(val).partition(", ")
    info = val.allocation_info
    return f"{shape} @ {info.memory_id}+{info.memory_offset}" if info is not None else f"{shape} ({where})"


def _svg(nodes: list[tuple[str, str, str, str, str]], edges: list[tuple[int, int]], n_inputs: int) -> str:
    """A layered drawing: inputs on top, each other node one row below the lowest node it reads from."""
    layer = [0] * len(nodes)
    for s, t in sorted(edges, key=lambda e: e[1]):
        layer[t] = max(layer[t], layer[s] + 1)
    for n in range(n_inputs, len(nodes)):  # instructions reading no drawn value still come after the inputs
        layer[n] = max(layer[n], 1)
    column: dict[int, int] = {}
    place = []
    for n in range(len(nodes)):
        col = column.get(layer[n], 0)
        column[layer[n]] = col + 1
        place.append((_MARGIN + col * (_BOX_W + _GAP_X), _MARGIN + layer[n] * (_BOX_H + _GAP_Y)))
    width = _MARGIN * 2 + max(column.values(), default=1) * (_BOX_W + _GAP_X)
    height = _MARGIN * 2 + (max(layer, default=0) + 1) * (_BOX_H + _GAP_Y)
    svg = [
        f"<div class='graph'><svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}'>",
        "<defs><marker id='arrow' viewBox='0 0 10 10' refX='10' refY='5' markerWidth='7' markerHeight='7' "
        "orient='auto-start-reverse'><path d='M0,0 L10,5 L0,10 z' fill='#8a93a3'/></marker></defs>",
    ]
    for s, t in edges:
        (x1, y1), (x2, y2) = place[s], place[t]
        x1, y1, x2 = x1 + _BOX_W / 2, y1 + _BOX_H, x2 + _BOX_W / 2
        mid = (y1 + y2) / 2
        svg.append(f"<path class='edge' d='M{x1},{y1} C{x1},{mid} {x2},{mid} {x2},{y2}' marker-end='url(#arrow)'/>")
    for n, (kind, css, label, second, tip) in enumerate(nodes):
        x, y = place[n]
        svg.append(f"<g class='{css}'><title>{html.escape(tip)}</title>")
        if kind == "ins":
            svg.append(f"<rect x='{x}' y='{y}' width='{_BOX_W}' height='{_BOX_H}' rx='6'/>")
        else:
            svg.append(f"<ellipse cx='{x + _BOX_W / 2}' cy='{y + _BOX_H / 2}' rx='{_BOX_W / 2}' ry='{_BOX_H / 2}'/>")
        svg.append(f"<text x='{x + 12}' y='{y + 19}'>{html.escape(_clip(label))}</text>")
        if second:
            svg.append(f"<text x='{x + 12}' y='{y + 36}'>{html.escape(_clip(second))}</text>")
        svg.append("</g>")
    svg.append("</svg></div>")
    return "\n".join(svg)


def _clip(text: str, limit: int = 36) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
