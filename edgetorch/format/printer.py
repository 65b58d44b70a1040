"""A readable listing of an execution plan: one line per instruction, values as ``%index``. Torch-free.

``%5 = aten::add.out(%1, %2, 1.0) -> %5  [arena 1 @ 1024, 4x8 f32]`` reads: instruction calls the kernel
on values 1 and 2 and the scalar 1.0, writing value 5, which lives in planned memory id 1 at byte offset
1024. A kernel's written values are its return value (the last argument, a tensor or a list of them); a
delegate's are its trailing tensors that no earlier instruction produced. The CLI's
``edgetorch inspect --instructions``, runtime error messages and the developer tools use this listing.
"""

from __future__ import annotations

from edgetorch.format.program import (
    Bool,
    BoolList,
    DelegateCall,
    Double,
    DoubleList,
    ExecutionPlan,
    FreeCall,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Null,
    OptionalTensorList,
    ScalarType,
    String,
    Tensor,
    TensorList,
)

DTYPE_NAMES = {
    ScalarType.BYTE: "u8",
    ScalarType.CHAR: "i8",
    ScalarType.SHORT: "i16",
    ScalarType.INT: "i32",
    ScalarType.LONG: "i64",
    ScalarType.HALF: "f16",
    ScalarType.FLOAT: "f32",
    ScalarType.DOUBLE: "f64",
    ScalarType.COMPLEX64: "c64",
    ScalarType.COMPLEX128: "c128",
    ScalarType.BOOL: "bool",
    ScalarType.BFLOAT16: "bf16",
}


def describe_tensor(tensor: Tensor) -> str:
    """``4x8 f32`` with where the data lives: ``arena 1 @ 1024``, ``constant 3``, or ``unplanned``."""
    shape = "x".join(str(s) for s in tensor.sizes) or "scalar"
    dtype = DTYPE_NAMES.get(tensor.scalar_type, getattr(tensor.scalar_type, "name", str(tensor.scalar_type)))
    info = tensor.allocation_info
    if info is not None:
        offset = (info.memory_offset_high << 32) | info.memory_offset_low
        where = f"arena {info.memory_id} @ {offset}"
    elif tensor.data_buffer_idx:
        where = f"constant {tensor.data_buffer_idx}"
    elif tensor.extra_tensor_info is not None and tensor.extra_tensor_info.fully_qualified_name:
        where = f"external {tensor.extra_tensor_info.fully_qualified_name!r}"
    else:
        where = "unplanned"
    return f"{where}, {shape} {dtype}"


def describe_value(plan: ExecutionPlan, index: int) -> str:
    """How an argument reads inline: ``%3`` for tensors and lists of them, the literal for scalars."""
    if index < 0 or index >= len(plan.values):
        return f"%{index}?"
    val = plan.values[index].val
    if isinstance(val, Null) or val is None:
        return "None"
    if isinstance(val, Int):
        return str(val.int_val)
    if isinstance(val, Bool):
        return str(val.bool_val)
    if isinstance(val, Double):
        return repr(val.double_val)
    if isinstance(val, String):
        return repr(val.string_val)
    if isinstance(val, IntList):
        return "[" + ", ".join(describe_value(plan, i) for i in val.items) + "]"
    if isinstance(val, DoubleList | BoolList):
        return repr(list(val.items))
    if isinstance(val, TensorList | OptionalTensorList):
        return "[" + ", ".join("None" if i < 0 else f"%{i}" for i in val.items) + "]"
    return f"%{index}"


def _is_tensor(plan: ExecutionPlan, index: int) -> bool:
    return 0 <= index < len(plan.values) and isinstance(plan.values[index].val, Tensor)


def preset_values(plan: ExecutionPlan) -> set[int]:
    """Values that hold data before any instruction runs: inputs, constants and mutable buffers."""
    ready = set(plan.inputs)
    for i, value in enumerate(plan.values):
        val = value.val
        if isinstance(val, Tensor) and (val.data_buffer_idx or val.extra_tensor_info is not None):
            ready.add(i)
    return ready


def _split_kernel_args(plan: ExecutionPlan, args: list[int]) -> tuple[list[int], list[int]]:
    """A kernel call's arguments split into (what it reads, what it writes).

    ExecuTorch's emitter passes the inputs, then the out arguments, then the return value again: the out
    tensor itself, or a TensorList of the out tensors when there are several.
    """
    if not args:
        return [], []
    ret = plan.values[args[-1]].val if 0 <= args[-1] < len(plan.values) else None
    outs = list(ret.items) if isinstance(ret, TensorList) else [args[-1]]
    reads = args[:-1]
    if reads[len(reads) - len(outs) :] == outs:
        reads = reads[: len(reads) - len(outs)]
    return reads, outs


def _split_delegate_args(plan: ExecutionPlan, args: list[int], defined: set[int]) -> tuple[list[int], list[int]]:
    """A delegate call's arguments (inputs, then outputs) split: outputs are the trailing tensors first written here."""
    cut = len(args)
    while cut > 0 and _is_tensor(plan, args[cut - 1]) and args[cut - 1] not in defined:
        cut -= 1
    return args[:cut], args[cut:]


def instruction_io(
    plan: ExecutionPlan, chain: int, index: int, defined: set[int] | None = None
) -> tuple[str, list[int], list[int]]:
    """What an instruction does, as (its name, the values it reads, the values it writes); ``defined`` (values
    written so far, by default those set before the first instruction) is updated with what it writes.

    The name is the operator (``aten::add.out``), ``delegate <id>#<index>``, ``move``, ``jump_false`` or ``free``.
    """
    defined = preset_values(plan) if defined is None else defined
    args = plan.chains[chain].instructions[index].instr_args
    if isinstance(args, KernelCall):
        op = plan.operators[args.op_index] if 0 <= args.op_index < len(plan.operators) else None
        name = "?" if op is None else f"{op.name}.{op.overload}" if op.overload else op.name
        ins, outs = _split_kernel_args(plan, list(args.args))
    elif isinstance(args, DelegateCall):
        delegate = plan.delegates[args.delegate_index] if 0 <= args.delegate_index < len(plan.delegates) else None
        name = f"delegate {delegate.id if delegate else '?'}#{args.delegate_index}"
        ins, outs = _split_delegate_args(plan, list(args.args), defined)
    elif isinstance(args, MoveCall):
        name, ins, outs = "move", [args.move_from], [args.move_to]
    elif isinstance(args, JumpFalseCall):
        name, ins, outs = "jump_false", [args.cond_value_index], []
    elif isinstance(args, FreeCall):
        name, ins, outs = "free", [args.value_index], []
    else:
        name, ins, outs = f"<{type(args).__name__}>", [], []
    defined.update(outs)
    return name, ins, outs


def format_instruction(plan: ExecutionPlan, chain: int, index: int, defined: set[int] | None = None) -> str:
    """One instruction as a line; ``defined`` (values written so far) is updated with what it writes."""
    name, ins, outs = instruction_io(plan, chain, index, defined)
    args = plan.chains[chain].instructions[index].instr_args
    if isinstance(args, KernelCall | DelegateCall):
        call = f"{name}({', '.join(describe_value(plan, i) for i in ins)})"
        if not outs:
            return call
        places = "; ".join(describe_tensor(plan.values[i].val) for i in outs if _is_tensor(plan, i))
        written = ", ".join(f"%{i}" for i in outs)
        return f"{written} = {call}" + (f"  [{places}]" if places else "")
    if isinstance(args, MoveCall):
        return f"%{args.move_to} = move {describe_value(plan, args.move_from)}"
    if isinstance(args, JumpFalseCall):
        return f"jump_false {describe_value(plan, args.cond_value_index)} -> instruction {args.destination_instruction}"
    if isinstance(args, FreeCall):
        return f"free %{args.value_index}"
    return name


def format_plan(plan: ExecutionPlan) -> str:
    """The whole method: a signature line, then every instruction of every chain, numbered."""
    params = ", ".join(
        f"%{i}: {describe_tensor(plan.values[i].val)}" if _is_tensor(plan, i) else f"%{i}: {describe_value(plan, i)}"
        for i in plan.inputs
    )
    lines = [f"method {plan.name}({params}) -> ({', '.join(f'%{i}' for i in plan.outputs)})"]
    defined = preset_values(plan)
    for c, chain in enumerate(plan.chains):
        if len(plan.chains) > 1:
            lines.append(f"  chain {c}:")
        for i in range(len(chain.instructions)):
            lines.append(f"  {i:4d}  {format_instruction(plan, c, i, defined)}")
    return "\n".join(lines)
