"""Re-inplace: a functional op whose first input is dead afterwards writes its result into that input.

Functionalization turns ``cache[:, pos] = new`` (``index_copy_``, ``index_put_``) into
``updated = index_put(cache, ...)`` plus a buffer-mutation output. Run as is, every call copies the
whole buffer into a fresh tensor and then copies it back: for an LLM's KV caches that is two full
copies of every cache per decoded token. When nothing reads the old value after the op,
``index_put_(cache, ...)`` gives the same result with no copy and no write-back, and the fresh tensor
is not planned at all.

:func:`reinplace_pass` rewrites an edge :class:`ExportedProgram` (it needs the graph signature to
tell mutable buffers and mutable user inputs from read-only inputs). The candidate ops default to
:data:`DEFAULT_INPLACEABLE_OPS`; the in-place form of each is found from the schemas (``X`` ->
``X_`` overload with the same arguments and the first one written), or given explicitly with
``inplace_overrides``. A candidate with no in-place form is only annotated
(``node.meta["_share_alloc_with_arg_idx"]``) when it would be safe. ``ExecutorchBackendConfig
(run_reinplace_pass=True)`` (or ``reinplace_extra_ops``) runs it before the buffer write-backs are
inserted. May import torch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx.experimental.symbolic_shapes import statically_known_true

from edgetorch.exir.dialects._ops import EdgeOpOverload, edge_op, to_aten
from edgetorch.exir.passes.replace_view_copy_with_view_pass import VIEW_OPS

__all__ = ["DEFAULT_INPLACEABLE_OPS", "mutated_arg_positions", "reinplace_pass"]

DEFAULT_INPLACEABLE_OPS: frozenset[Any] = frozenset({edge_op(torch.ops.aten.index_put.default)})
"""The functional edge ops the pass rewrites unless told otherwise."""

SHARE_ALLOC_KEY = "_share_alloc_with_arg_idx"


def _schema(op: Any) -> torch.FunctionSchema:
    schema = getattr(to_aten(op), "_schema", None)
    if schema is None:
        raise TypeError(
            f"expected an operator overload with a schema, found {op!r}; pass e.g. ops.edge.aten.add.Tensor"
        )
    return schema


def _same_arguments_first_written(functional: torch.FunctionSchema, inplace: torch.FunctionSchema) -> bool:
    """True when ``inplace`` takes the arguments of ``functional`` (by position and type), writing the first."""
    f_args, i_args = functional.arguments, inplace.arguments
    if not i_args or len(f_args) != len(i_args):
        return False
    alias = i_args[0].alias_info
    if alias is None or not alias.is_write:
        return False
    return all(str(f.type) == str(i.type) for f, i in zip(f_args, i_args))


def mutated_arg_positions(op: Any) -> tuple[int, ...]:
    """The argument positions ``op`` writes and returns (its schema's ``Tensor(a!)`` arguments)."""
    schema = _schema(op)
    written = {
        frozenset(r.alias_info.before_set): None
        for r in schema.returns
        if r.alias_info is not None and r.alias_info.is_write
    }
    positions = [
        i
        for i, a in enumerate(schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write and frozenset(a.alias_info.before_set) in written
    ]
    return tuple(positions)


def _derive_inplace(functional: Any) -> EdgeOpOverload | None:
    """The edge in-place overload of an aten op (``pow.Tensor_Scalar`` -> ``pow_.Scalar``), or None."""
    schema = _schema(functional)
    namespace, _, base = schema.name.partition("::")
    if namespace != "aten":
        return None
    packet = getattr(torch.ops.aten, base + "_", None)
    if packet is None:
        return None
    for name in packet.overloads():
        candidate = getattr(packet, name)
        if _same_arguments_first_written(schema, candidate._schema):
            return edge_op(candidate)
    return None


def _check_mapping(functional: Any, inplace: Any) -> tuple[int, ...]:
    f_schema, i_schema = _schema(functional), _schema(inplace)
    if not _same_arguments_first_written(f_schema, i_schema):
        raise ValueError(
            f"reinplace: {functional} -> {inplace} does not pair a functional op with its in-place form: "
            f"expected the same argument types with the first one Tensor(a!), found {f_schema} and {i_schema}; "
            "fix the inplace_overrides entry"
        )
    if not i_schema.name.startswith(f_schema.name + "_"):
        raise ValueError(
            f"reinplace: {functional} -> {inplace}: expected the in-place op to be named "
            f"{f_schema.name}_..., found {i_schema.name} (a typo such as add -> sub_?); fix the inplace_overrides entry"
        )
    positions = mutated_arg_positions(inplace)
    if not positions:
        raise ValueError(
            f"reinplace: {inplace} writes no argument it returns (no Tensor(a!) argument and return); "
            "declare the mutation in its schema"
        )
    return positions


def _fits(arg: torch.fx.Node, node: torch.fx.Node) -> bool:
    """True when ``arg`` already has the shape and dtype of ``node``'s result (no broadcast, no dtype change)."""
    a, o = arg.meta.get("val"), node.meta.get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(o, torch.Tensor):
        return True
    if a.dtype != o.dtype or a.dim() != o.dim():
        return False
    for x, y in zip(a.shape, o.shape):
        if isinstance(x, int) and isinstance(y, int):
            if x != y:
                return False
        elif not statically_known_true(x == y):
            return False
    return True


def _may_alias(node: torch.fx.Node) -> bool:
    """True unless ``node`` is an operator whose result is a fresh tensor (not a view of its input)."""
    if node.op != "call_function":
        return True
    target = to_aten(node.target)
    schema = getattr(target, "_schema", None)
    if schema is None:
        return True  # getitem, control flow, delegates: assume the worst
    return bool(schema.returns and schema.returns[0].alias_info is not None) or target in VIEW_OPS


def _safe(arg: Any, node: torch.fx.Node, read_later: set[torch.fx.Node], inputs: set, mutable: set) -> bool:
    if not isinstance(arg, torch.fx.Node) or arg in read_later or not _fits(arg, node):
        return False
    # A view of ``arg`` taken earlier would become an alias once view copies are removed.
    if any(user is not node and _may_alias(user) for user in arg.users):
        return False
    return arg not in inputs or arg in mutable


def _resolve(ops: Iterable[Any], overrides: dict[Any, Any]) -> dict[Any, tuple[Any, tuple[int, ...]] | None]:
    resolved: dict[Any, tuple[Any, tuple[int, ...]] | None] = {}
    for op in {*ops, *overrides}:
        inplace = overrides[op] if op in overrides else _derive_inplace(op)
        resolved[op] = None if inplace is None else (inplace, _check_mapping(op, inplace))
    return resolved


def reinplace_pass(
    ep: ExportedProgram,
    ops_to_inplace: Iterable[Any] | None = None,
    inplace_overrides: dict[Any, Any] | None = None,
) -> ExportedProgram:
    """Rewrite each call of a candidate op into its in-place form where the written argument is dead after it.

    The written argument must not be read by anything after the op (nor be viewed by anything), must
    already have the result's shape and dtype, and, if it is a program input, be a mutable buffer or a
    mutated user input. ``ops_to_inplace`` (default :data:`DEFAULT_INPLACEABLE_OPS`; empty disables
    everything) lists functional ops; ``inplace_overrides`` maps more of them to an explicit in-place op
    and is validated up front (``ValueError`` on a mismatch). Modifies ``ep`` and returns it.
    """
    overrides = dict(inplace_overrides or {})
    resolved = _resolve(DEFAULT_INPLACEABLE_OPS if ops_to_inplace is None else ops_to_inplace, overrides)
    graph, signature = ep.graph, ep.graph_signature
    inputs = {n for n in graph.nodes if n.op == "placeholder"}
    mutable_buffers = {
        name for name, fqn in signature.inputs_to_buffers.items() if fqn in signature.buffers_to_mutate.values()
    }
    mutable_names = mutable_buffers | set(signature.user_inputs_to_mutate.values())
    mutable = {n for n in inputs if n.name in mutable_names}

    read_later: set[torch.fx.Node] = set()  # values something after the current node reads (the output too)
    for node in reversed(list(graph.nodes)):
        if node.op != "call_function":
            read_later.update(node.all_input_nodes)
            continue
        entry = resolved.get(node.target, False)
        if entry is False:
            read_later.update(node.all_input_nodes)
            continue
        if entry is None:  # no in-place form: mark that the result may share the first tensor's memory
            first = next((i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node)), None)
            if first is not None and _safe(node.args[first], node, read_later, inputs, mutable):
                node.meta[SHARE_ALLOC_KEY] = first
            read_later.update(node.all_input_nodes)
            continue
        inplace, positions = entry
        for i in positions:
            if i >= len(node.args) or not isinstance(node.args[i], torch.fx.Node):
                raise ValueError(
                    f"reinplace: expected {node.format_node()} to pass a tensor node at position {i} "
                    f"(the argument {inplace} writes), found {node.args[i] if i < len(node.args) else 'nothing'}; "
                    "export passes written arguments positionally"
                )
        if not all(_safe(node.args[i], node, read_later, inputs, mutable) for i in positions):
            read_later.update(node.all_input_nodes)
            continue
        with graph.inserting_before(node):
            new = graph.call_function(inplace, tuple(node.args), dict(node.kwargs))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        read_later.update(new.all_input_nodes)

    outputs = graph.output_node().args[0]
    outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    for spec, value in zip(signature.output_specs, outputs):
        if isinstance(value, torch.fx.Node) and getattr(spec.arg, "name", None) not in (None, value.name):
            spec.arg.name = value.name
    ep.graph_module.recompile()
    return ep


def writes_in_place(value: object, target: torch.fx.Node) -> bool:
    """True when ``value`` is a call of an in-place op that writes ``target`` (no write-back needed)."""
    if not isinstance(value, torch.fx.Node) or value.op != "call_function":
        return False
    if getattr(to_aten(value.target), "_schema", None) is None:
        return False
    return any(i < len(value.args) and value.args[i] is target for i in mutated_arg_positions(value.target))
