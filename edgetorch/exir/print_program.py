"""Human-readable views of a program, as ExecuTorch's ``exir.print_program`` offers them.

* :func:`print_program`: each method's instructions, one a line, arguments in a short notation.
* :func:`pretty_print`: any schema object (``Program`` down to ``Tensor``), field by field as the schema has them.
* :func:`inspect_node`: a graph listing with an arrow at one node, then that node's metadata and source.

``ExecutorchProgramManager.dump_executorch_program(verbose)`` calls the first two. Imports only
edgetorch.format; graphs are read through their public torch.fx attributes.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
from typing import Any, TextIO

from edgetorch.format import program as fbp

__all__ = ["format_value", "inspect_node", "pretty_print", "print_program"]

_DTYPE_CODES = {
    fbp.ScalarType.BYTE: "u8",
    fbp.ScalarType.CHAR: "i8",
    fbp.ScalarType.SHORT: "i16",
    fbp.ScalarType.INT: "i32",
    fbp.ScalarType.LONG: "i64",
    fbp.ScalarType.HALF: "f16",
    fbp.ScalarType.FLOAT: "f32",
    fbp.ScalarType.DOUBLE: "f64",
    fbp.ScalarType.BOOL: "b",
    fbp.ScalarType.BFLOAT16: "bf16",
}


def format_value(value: fbp.EValue, show_meminfo: bool = True, mark_dynamic_shape_tensor: bool = False) -> str:
    """One value in the short notation.

    Tensors are ``T[sizes]dtype`` (``CT`` for constants), with ``@mem_id+offset`` when planned
    and ``~`` before the sizes when they are an upper bound; ``I``/``D``/``B``/``S`` are int,
    double, bool and string scalars; ``IL``/``DL``/``BL``/``TL``/``OTL`` lists (of value
    indices for tensor and int lists); ``N`` is None.
    """
    v = value.val
    if isinstance(v, fbp.Tensor):
        kind = "CT" if v.data_buffer_idx > 0 else "T"
        dtype = _DTYPE_CODES.get(v.scalar_type, v.scalar_type.name.lower())
        bound = "~" if mark_dynamic_shape_tensor and v.shape_dynamism != fbp.TensorShapeDynamism.STATIC else ""
        where = ""
        if show_meminfo and kind == "T":
            info = v.allocation_info
            where = f"@{info.memory_id}+{info.memory_offset}" if info is not None else "@unplanned"
        return f"{kind}{bound}{list(v.sizes)}{dtype}{where}"
    prefixes = {
        fbp.IntList: "IL",
        fbp.DoubleList: "DL",
        fbp.BoolList: "BL",
        fbp.TensorList: "TL",
        fbp.OptionalTensorList: "OTL",
    }
    if type(v) in prefixes:
        return f"{prefixes[type(v)]}{list(v.items)}"
    if isinstance(v, fbp.Int):
        return f"I{v.int_val}"
    if isinstance(v, fbp.Double):
        return f"D{v.double_val}"
    if isinstance(v, fbp.Bool):
        return f"B{int(v.bool_val)}"
    if isinstance(v, fbp.String):
        return f"S{v.string_val!r}"
    return "N"


def print_program(
    program: fbp.Program,
    show_meminfo: bool = True,
    mark_dynamic_shape_tensor: bool = False,
    out: TextIO | None = None,
) -> None:
    """Print every method's instructions: ``pc: operator args``, each argument ``index[I<n>|O<n>]:value``.

    ``I<n>``/``O<n>`` mark the method's n-th input/output; values are in :func:`format_value`'s notation.
    """
    out = out or sys.stdout
    for plan in program.execution_plan:
        inputs = {v: i for i, v in enumerate(plan.inputs)}
        outputs = {v: i for i, v in enumerate(plan.outputs)}

        def arg(index: int, plan: fbp.ExecutionPlan = plan, inputs: dict = inputs, outputs: dict = outputs) -> str:
            mark = (f"I{inputs[index]}" if index in inputs else "") + (f"O{outputs[index]}" if index in outputs else "")
            if not 0 <= index < len(plan.values):
                return f"{index}{mark}:<out of range>"
            return f"{index}{mark}:{format_value(plan.values[index], show_meminfo, mark_dynamic_shape_tensor)}"

        instructions = [ins for chain in plan.chains for ins in chain.instructions]
        print(f"method {plan.name!r}: {len(instructions)} instructions", file=out)
        for pc, ins in enumerate(instructions):
            a = ins.instr_args
            if isinstance(a, fbp.KernelCall):
                op = plan.operators[a.op_index]
                name = f"{op.name}.{op.overload}" if op.overload else op.name
                line = f"{name} {', '.join(map(arg, a.args))}"
            elif isinstance(a, fbp.DelegateCall):
                line = f"delegate {plan.delegates[a.delegate_index].id} {', '.join(map(arg, a.args))}"
            elif isinstance(a, fbp.JumpFalseCall):
                line = f"jump_false {arg(a.cond_value_index)} -> {a.destination_instruction}"
            elif isinstance(a, fbp.MoveCall):
                line = f"move {arg(a.move_from)} -> {arg(a.move_to)}"
            elif isinstance(a, fbp.FreeCall):
                line = f"free {arg(a.value_index)}"
            else:
                line = f"<{type(a).__name__}>"
            print(f"{pc:4}: {line}", file=out)


def pretty_print(obj: Any, indent: int = 0, out: TextIO | None = None) -> None:
    """Print a schema object with every field, nested objects indented; byte blobs show their size."""
    out = out or sys.stdout
    out.write(_pretty(obj, indent) + ("\n" if indent == 0 else ""))


def _pretty(obj: Any, indent: int) -> str:
    pad = "  " * (indent + 1)
    if isinstance(obj, enum.Enum):
        return obj.name
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return f"<{len(obj)} bytes>"
    if _short_numbers(obj):
        return repr(list(obj))
    if isinstance(obj, list):
        items = [f"{pad}[{i}] {_pretty(x, indent + 1)}" for i, x in enumerate(obj)]
        return "[\n" + "\n".join(items) + "\n" + "  " * indent + "]" if items else "[]"
    if dataclasses.is_dataclass(obj):
        fields = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
        simple = all(isinstance(v, (int, float, str, type(None), enum.Enum)) or _short_numbers(v) for _, v in fields)
        if simple:
            return f"{type(obj).__name__}(" + ", ".join(f"{k}={_pretty(v, indent)}" for k, v in fields) + ")"
        rows = [f"{pad}{k}={_pretty(v, indent + 1)}" for k, v in fields]
        return f"{type(obj).__name__}(\n" + ",\n".join(rows) + "\n" + "  " * indent + ")"
    return repr(obj)


def _short_numbers(obj: Any) -> bool:
    return isinstance(obj, list) and len(obj) < 10 and all(isinstance(x, (int, float, bool)) for x in obj)


def inspect_node(graph: Any, node: Any) -> str:
    """``graph`` listed with ``-->`` at ``node``, then the node's metadata and the user code it came from."""
    lines = ["Here is the node in the graph module:", "graph():"]
    for n in graph.nodes:
        text = n.format_node()
        if text:
            lines.append(("--> " if n is node else "    ") + text)
    lines.append(f"This node {node} has metadata of:")
    for key in ("val", "spec", "debug_handle"):
        if key in node.meta:
            lines.append(f"    {key}: {node.meta[key]}")
    trace = node.meta.get("stack_trace")
    lines.append("The node stacktrace:")
    lines.append(trace.rstrip() if trace else "    (none recorded)")
    return "\n".join(lines)
