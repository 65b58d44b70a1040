"""Re-inplace: a mutable buffer updated by ``index_put`` is written in place instead of copied twice.

Functionalization turns ``cache[:, pos] = new`` (``index_copy_``, ``index_put_``) into
``updated = index_put(cache, ...)`` plus a write-back ``copy_(cache, updated)`` at the end of the
method. Run as is, every call copies the whole buffer into a fresh tensor and then copies it back:
for an LLM's KV caches that is two full copies of every cache per decoded token. When nothing reads
the buffer's old value after the update, ``index_put_(cache, ...)`` gives the same result with no
copy and no write-back, and the fresh tensor is not planned at all.

:func:`reinplace_buffer_updates` works on an :class:`ExportedProgram` after
:func:`~edgetorch.exir.passes.out_variant.insert_buffer_write_back` (it needs the graph signature to
tell buffers from user inputs). ``ExecutorchBackendConfig(run_reinplace_pass=True)`` runs it. May import torch.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind, TensorArgument

from edgetorch.exir.dialects import to_aten
from edgetorch.exir.passes.replace_view_copy_with_view_pass import VIEW_OPS

# Functional op -> its in-place form (same arguments, the first one written).
INPLACE_FORMS = {torch.ops.aten.index_put.default: torch.ops.aten.index_put_.default}


def reinplace_buffer_updates(ep: ExportedProgram) -> int:
    """Rewrite each ``copy_(buffer, index_put(buffer, ...))`` write-back into ``index_put_(buffer, ...)``.

    Only mutable buffers (not user inputs), and only when every other reader of the buffer runs before
    the update and is not a view that could be read later. Returns how many updates were rewritten.
    """
    graph, signature = ep.graph, ep.graph_signature
    buffers = set(signature.inputs_to_buffers)
    output = graph.output_node()
    order = {node: i for i, node in enumerate(graph.nodes)}
    results = list(output.args[0])
    rewritten = 0
    for i, spec in enumerate(signature.output_specs):
        if spec.kind != OutputKind.BUFFER_MUTATION:
            continue
        copy = results[i]
        if not _is_write_back(copy):
            continue
        buffer, update = copy.args[0], copy.args[1]
        if buffer.op != "placeholder" or buffer.name not in buffers or not isinstance(update, torch.fx.Node):
            continue
        inplace = _inplace_form(update)
        if inplace is None or update.args[0] is not buffer or not _old_value_dead(buffer, update, copy, order):
            continue
        if any(a is buffer for a in _node_args(update)[1:]):
            continue  # the buffer is also an index or the values: reading it while writing it
        with graph.inserting_before(update):
            node = graph.call_function(inplace, tuple(update.args), dict(update.kwargs))
        node.meta.update(update.meta)
        node.meta["val"] = buffer.meta["val"]
        copy.replace_all_uses_with(node)
        update.replace_all_uses_with(node)
        graph.erase_node(copy)
        graph.erase_node(update)
        results[i] = node
        spec.arg = TensorArgument(name=node.name)
        rewritten += 1
    if rewritten:
        output.args = (tuple(results),)
        ep.graph_module.recompile()
    return rewritten


def _is_write_back(node: object) -> bool:
    return (
        isinstance(node, torch.fx.Node)
        and node.op == "call_function"
        and to_aten(node.target) is torch.ops.aten.copy_.default
        and len(node.args) >= 2
    )


def _inplace_form(node: torch.fx.Node) -> torch._ops.OpOverload | None:
    if node.op != "call_function":
        return None
    return INPLACE_FORMS.get(to_aten(node.target))


def _node_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def _old_value_dead(buffer: torch.fx.Node, update: torch.fx.Node, copy: torch.fx.Node, order: dict) -> bool:
    """True when no reader of ``buffer`` other than ``update`` and ``copy`` can run at or after ``update``.

    Readers before the update are fine unless they are views (``*_copy`` ops become aliases of their
    input when memory planning removes view copies), whose own readers could come after it.
    """
    for user in buffer.users:
        if user is update or user is copy:
            continue
        if order[user] >= order[update] or _may_alias(user):
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
