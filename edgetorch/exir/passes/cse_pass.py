"""Common subexpression elimination: two calls of the same pure, deterministic op on equivalent arguments
compute the same value, so the later one's users read the earlier one. Equivalence is by value numbering: a
node's number is fixed by its op and its arguments' numbers, so chains of equal computations collapse at once.

Pure means an ATen op whose schema writes none of its arguments and that is not random (rand, dropout, ...),
or Python arithmetic on symbolic sizes; custom namespaces are left alone (their schemas may not declare their
side effects). Nodes the graph returns are never merged: the signature names them (buffer writes)."""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch.fx import GraphModule
from torch.fx.node import Node

from edgetorch.exir.dialects import EdgeOpOverload
from edgetorch.exir.pass_base import ExportPass, PassResult

_RANDOM = frozenset(
    f"aten::{name}"
    for name in (
        "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
        "dropout", "native_dropout", "multinomial", "normal", "uniform",
    )
)  # fmt: skip
_OPAQUE = (torch.dtype, int, float, str, bool, type(None))


def is_pure(target: Any) -> bool:
    """Whether two calls of ``target`` on equal arguments always give equal results and change nothing."""
    if getattr(target, "__module__", None) == "_operator":
        return True
    if not isinstance(target, (torch._ops.OpOverload, EdgeOpOverload)):
        return False
    name = target._schema.name
    if not name.startswith("aten::") or name in _RANDOM:
        return False
    return not any(a.alias_info is not None and a.alias_info.is_write for a in target._schema.arguments)


class CSEPass(ExportPass):
    """Merges structurally equal computations of pure ops (see the module's docstring)."""

    UNSAFE_OPS = _RANDOM

    def call(self, graph_module: GraphModule) -> PassResult:
        graph = graph_module.graph
        returned = {a for a in graph.output_node().args[0] if isinstance(a, Node)}
        numbers: dict[Node, int] = {}
        by_key: dict[Any, int] = {}
        first: dict[int, Node] = {}
        pure: dict[Any, bool] = {}

        fresh = itertools.count().__next__

        def key_of(value: Any) -> Any:
            if isinstance(value, Node):
                return ("node", number(value))
            if isinstance(value, _OPAQUE):
                return value
            if isinstance(value, (list, tuple)):
                return tuple(key_of(v) for v in value)
            if isinstance(value, dict):
                return tuple(sorted((k, key_of(v)) for k, v in value.items()))
            if isinstance(value, (torch.device, torch.layout, torch.memory_format)):
                return str(value)
            raise TypeError(type(value).__name__)

        def number(node: Node) -> int:
            if node in numbers:
                return numbers[node]
            n = None
            if node.op == "call_function" and node not in returned:
                if node.target not in pure:
                    pure[node.target] = is_pure(node.target)
                if pure[node.target]:
                    try:
                        key = (node.target, key_of(node.args), key_of(dict(node.kwargs)))
                    except TypeError:  # an argument with no structural key: unique
                        key = None
                    if key is not None:
                        n = by_key.setdefault(key, fresh())
            numbers[node] = fresh() if n is None else n
            return numbers[node]

        changed = False
        for node in list(graph.nodes):
            n = number(node)
            kept = first.setdefault(n, node)
            if kept is not node:
                node.replace_all_uses_with(kept)
                graph.erase_node(node)
                changed = True
        if changed:
            graph.eliminate_dead_code()
            graph.lint()
        return PassResult(graph_module, changed)
