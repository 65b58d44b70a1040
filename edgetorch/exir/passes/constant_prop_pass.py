"""Constant propagation: compute ahead of time every op whose inputs are all constants.

Inputs count as constant when they are parameters, buffers the program never mutates, lifted
tensor constants, Python scalars, or results already computed this way. Each computed tensor
that the rest of the program reads becomes a new lifted constant (``_prop_tensor_constant<N>``);
the ops and any weights nothing reads any more are dropped. ``full`` is left to run (a constant
of any size for a few bytes of program), and so are quantize/dequantize ops, which keep a
quantized weight quantized instead of folding it back to float. Works on ATen and Edge programs.
May import torch.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, OutputSpec, TensorArgument

from edgetorch.exir.dialects import to_aten
from edgetorch.exir.dialects._ops import ops

__all__ = ["constant_prop_pass", "get_default_skip_targets"]

_SCALARS = (bool, int, float, str, torch.dtype, torch.device, torch.layout, torch.memory_format, type(None))


def get_default_skip_targets() -> set[torch._ops.OpOverload]:
    """The ops never computed ahead of time: ``full`` and the ``quantized_decomposed`` (de)quantize ops."""
    return {torch.ops.aten.full.default}


def _skipped(op: torch._ops.OpOverload, skip: set[Any]) -> bool:
    if op in skip:
        return True
    quant = op.namespace == "quantized_decomposed" and op._opname.startswith(("quantize_", "dequantize_"))
    random = torch.Tag.nondeterministic_seeded in op.tags
    return quant or random or op._schema.is_mutable


def constant_prop_pass(
    exported_program: ExportedProgram,
    custom_skip_targets: Iterable[Any] | None = None,
    _skip_dim_order: bool = True,
) -> ExportedProgram:
    """``exported_program`` with its constant subexpressions computed (a new program; the input is left as is).

    ``custom_skip_targets`` (ATen or Edge ops) are never computed ahead of time, besides the defaults. A method
    output that becomes a constant is returned through a copy (a program's outputs are not its read-only
    constants): ``aten.clone``, or ``dim_order_ops._clone_dim_order`` with ``_skip_dim_order=False`` (as the
    program's Edge config has it).
    """
    program = exported_program
    signature = program.graph_signature
    skip = get_default_skip_targets() | {to_aten(t) for t in custom_skip_targets or ()}
    mutated = set(signature.buffers_to_mutate.values())
    known: dict[torch.fx.Node, torch.Tensor] = {}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    for spec in signature.input_specs:
        node = placeholders[spec.arg.name]
        if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.target not in mutated):
            known[node] = program.state_dict[spec.target] if spec.target in program.state_dict else None
            if known[node] is None:
                known[node] = program.constants[spec.target]  # a non-persistent buffer
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            known[node] = program.constants[spec.target]
    inputs = set(known)

    def value(arg: Any) -> Any:
        return known[arg] if isinstance(arg, torch.fx.Node) else arg

    for node in program.graph.nodes:
        op = to_aten(node.target) if node.op == "call_function" else None
        if not isinstance(op, torch._ops.OpOverload) or _skipped(op, skip):
            continue
        args = [*torch.fx.node.map_aggregate(node.args, lambda a: a), *node.kwargs.values()]
        leaves = torch.utils._pytree.tree_leaves(args)
        if not all(leaf in known if isinstance(leaf, torch.fx.Node) else isinstance(leaf, _SCALARS) for leaf in leaves):
            continue
        with torch.no_grad():
            result = node.target(*torch.fx.node.map_arg(node.args, value), **torch.fx.node.map_arg(node.kwargs, value))
        if isinstance(result, torch.Tensor):
            known[node] = result
    computed = [n for n in known if n not in inputs and any(u not in known for u in n.users)]
    return _with_constants(program, computed, known, _skip_dim_order) if computed else program


def _with_constants(
    program: ExportedProgram,
    computed: list[torch.fx.Node],
    known: dict[torch.fx.Node, torch.Tensor],
    skip_dim_order: bool = True,
) -> ExportedProgram:
    """A copy of ``program`` whose ``computed`` nodes are read from new lifted constants."""
    shared = {id(t): t for t in [*program.state_dict.values(), *program.constants.values()]}
    new = copy.deepcopy(program, memo=shared)
    graph, signature = new.graph, new.graph_signature
    by_name = {n.name: n for n in graph.nodes}
    specs = {s.arg.name: s for s in signature.input_specs}
    first_user_input = next(
        (by_name[s.arg.name] for s in signature.input_specs if s.kind == InputKind.USER_INPUT),
        next(n for n in graph.nodes if n.op != "placeholder"),
    )
    constants = dict(new.constants)
    taken = set(constants) | set(new.state_dict)
    counter = 0
    for old in computed:
        node = by_name[old.name]
        while f"_prop_tensor_constant{counter}" in taken:
            counter += 1
        name = f"_prop_tensor_constant{counter}"
        taken.add(name)
        with graph.inserting_before(first_user_input):
            placeholder = graph.placeholder(name)
        placeholder.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(placeholder)
        constants[name] = known[old].detach().clone()
        specs[placeholder.name] = InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(placeholder.name), name)
    graph.eliminate_dead_code()
    dropped = set()
    for node in [n for n in graph.nodes if n.op == "placeholder" and not n.users]:
        spec = specs[node.name]
        if spec.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR):
            dropped.add(spec.target)
            graph.erase_node(node)
    output = graph.output_node()
    outputs = list(output.args[0])
    clone = ops.edge.aten.clone.default if skip_dim_order else ops.edge.dim_order_ops._clone_dim_order.default
    for i, value in enumerate(outputs):
        if isinstance(value, torch.fx.Node) and value.op == "placeholder" and value.name in specs:
            if specs[value.name].kind == InputKind.CONSTANT_TENSOR and value.name.startswith("_prop_tensor_constant"):
                with graph.inserting_before(output):
                    outputs[i] = graph.call_function(clone, (value,))
                outputs[i].meta["val"] = value.meta.get("val")
    output.args = (outputs,)
    new.graph_module.recompile()
    output_specs = [
        OutputSpec(s.kind, TensorArgument(v.name) if isinstance(v, torch.fx.Node) else s.arg, s.target)
        for s, v in zip(signature.output_specs, outputs)
    ]
    input_specs = [specs[n.name] for n in graph.nodes if n.op == "placeholder"]
    return ExportedProgram(
        root=new.graph_module,
        graph=graph,
        graph_signature=ExportGraphSignature(input_specs, output_specs),
        state_dict={k: v for k, v in new.state_dict.items() if k not in dropped},
        range_constraints=new.range_constraints,
        module_call_graph=new.module_call_graph,
        example_inputs=new.example_inputs,
        constants={k: v for k, v in constants.items() if k not in dropped},
        verifiers=new.verifiers,
    )
