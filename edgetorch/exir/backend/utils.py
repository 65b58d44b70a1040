"""Helpers around delegated graphs: printing them with their delegates, delegate debug maps, tagging state.

``format_delegated_graph`` shows a graph and, under each ``lowered_module_N``,
the backend and the Edge graph it took. ``DelegateMappingBuilder`` builds the
``debug_handle_map`` a backend returns from ``preprocess`` (delegate-internal
identifier -> debug handles of the Edge nodes it covers). ``tag_constant_data`` and
``tag_mutated_buffer`` let a partitioner hand a delegate the weights and the mutable
buffers its nodes use. May import torch.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.export import ExportedProgram

from edgetorch.exir.backend.delegate import executorch_call_delegate, is_lowered_module
from edgetorch.exir.backend.partition_utils import TAG, tag_constant_data

__all__ = [
    "DelegateMappingBuilder",
    "format_delegated_graph",
    "get_delegated_payload",
    "get_delegates",
    "get_non_lowered_nodes",
    "is_identical_graph",
    "print_delegated_graph",
    "tag_constant_data",
    "tag_mutated_buffer",
]


def get_delegates(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The ``get_attr`` nodes of ``graph`` that fetch a lowered module (one per delegate), in order."""
    owner = graph.owning_module
    return [
        n
        for n in graph.nodes
        if n.op == "get_attr"
        and (
            is_lowered_module(getattr(owner, n.target, None))
            if owner is not None
            else n.name.startswith("lowered_module_")
        )
    ]


def get_delegated_payload(graph_module: torch.fx.GraphModule) -> dict[str, tuple[str, list[Any], bytes]]:
    """Each delegate of a lowered graph: its ``lowered_module_N`` name -> (backend id, compile specs, the blob
    its backend's ``preprocess`` produced)."""
    payloads: dict[str, tuple[str, list[Any], bytes]] = {}
    for node in graph_module.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            module = getattr(graph_module, node.name, None)
            if is_lowered_module(module):
                payloads[node.name] = (module.backend_id, module.compile_specs, module.processed_bytes)
    return payloads


def _is_delegate_output(node: torch.fx.Node) -> bool:
    """A getitem that picks one output of an executorch_call_delegate (delegate outputs come flattened)."""
    return (
        node.target == operator.getitem
        and len(node.args) == 2
        and isinstance(node.args[0], torch.fx.Node)
        and node.args[0].target == executorch_call_delegate
        and isinstance(node.args[1], int)
    )


def get_non_lowered_nodes(graph: torch.fx.Graph) -> list[torch.fx.Node]:
    """The operator calls a lowering left in the program: neither delegate calls nor the getitems reading them."""
    return [
        n
        for n in graph.nodes
        if n.op == "call_function" and n.target != executorch_call_delegate and not _is_delegate_output(n)
    ]


def is_identical_graph(graph_left: torch.fx.GraphModule, graph_right: torch.fx.GraphModule) -> bool:
    """True when the two graphs have as many nodes and, node by node in order, each pair computes the same
    thing: the same op and target, applied to inputs that are the same in the same way (compared through
    the whole chain of producers, not by name)."""
    left, right = list(graph_left.graph.nodes), list(graph_right.graph.nodes)
    if len(left) != len(right):
        return False
    # One structural key per node (op, target, keys of its inputs), built in graph order so that
    # a node's inputs already have theirs; equal keys mean equal producer trees.
    keys: dict[tuple, int] = {}
    node_key: dict[torch.fx.Node, int] = {}

    def key(node: torch.fx.Node) -> int:
        inputs = tuple(node_key[a] if a in node_key else key(a) for a in node.all_input_nodes)
        node_key[node] = keys.setdefault((node.op, node.target, inputs), len(keys))
        return node_key[node]

    return all(key(a) == key(b) for a, b in zip(left, right))


def tag_mutated_buffer(program: ExportedProgram) -> None:
    """Tag each buffer the program mutates with the tag of its users, so their delegate owns and updates it.

    Call it after tagging the operator nodes. A buffer whose users carry several tags takes the
    smallest (ExecuTorch's choice). Where ExecuTorch's delegate then owns the buffer, edgetorch's
    ``to_backend`` keeps it in the program and hands it to the delegate as an input, writing the
    delegate's new value back: the same results, the state held outside the delegate.
    """
    signature = program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    for node in program.graph.nodes:
        if node.op == "placeholder" and signature.inputs_to_buffers.get(node.name) in mutated:
            tags = {user.meta[TAG] for user in node.users if user.meta.get(TAG) is not None}
            if tags:
                node.meta[TAG] = min(tags)


def format_delegated_graph(graph_module: torch.fx.GraphModule) -> str:
    """The graph's nodes, one per line, with each lowered module's backend id and lowered graph beneath it."""
    lines = ["graph():"]
    for node in graph_module.graph.nodes:
        lines.append(f"  {node.format_node()}")
        module = getattr(graph_module, node.target, None) if node.op == "get_attr" else None
        if is_lowered_module(module):
            lines.append(f"    backend_id: {module.backend_id}")
            lines.append("    lowered graph():")
            lines += [f"      {n.format_node()}" for n in module.original_module.graph.nodes]
    return "\n".join(lines) + "\n"


def print_delegated_graph(graph_module: torch.fx.GraphModule) -> None:
    """Print :func:`format_delegated_graph`."""
    print(format_delegated_graph(graph_module))


class DelegateMappingBuilder:
    """Collects delegate debug identifier -> Edge debug handles for a backend's ``debug_handle_map``.

    Identifiers are chosen by the backend (ints or strings), or, with
    ``generated_identifiers=True``, numbered 0, 1, ... by the builder.
    """

    def __init__(self, generated_identifiers: bool = False) -> None:
        self._generated = generated_identifiers
        self._map: dict[int | str, set[int]] = {}

    def insert_delegate_mapping_entry(
        self,
        nodes: torch.fx.Node | list[torch.fx.Node] | None = None,
        handles: int | list[int | None] | None = None,
        identifier: int | str | None = None,
    ) -> int | str:
        """Record that ``identifier`` covers ``nodes`` (their ``meta["debug_handle"]``) or ``handles``; returns it."""
        if (nodes is None) == (handles is None):
            raise ValueError("give exactly one of nodes= or handles=")
        identifier = self._identifier(identifier)
        if nodes is not None:
            found = [n.meta.get("debug_handle") for n in (nodes if isinstance(nodes, list) else [nodes])]
        else:
            found = list(handles) if isinstance(handles, Iterable) else [handles]
        valid = {h for h in found if h is not None}
        if not valid:
            raise ValueError(f"no debug handles for delegate identifier {identifier!r}: the nodes have none")
        self._map[identifier] = valid
        return identifier

    def _identifier(self, identifier: int | str | None) -> int | str:
        if self._generated:
            if identifier is not None:
                raise ValueError(f"this builder numbers identifiers itself; got {identifier!r}")
            return len(self._map)
        if identifier is None:
            raise ValueError("pass identifier=, or build with DelegateMappingBuilder(generated_identifiers=True)")
        if identifier in self._map:
            raise ValueError(f"delegate identifier {identifier!r} was already inserted; identifiers must be unique")
        return identifier

    def get_delegate_mapping(self) -> dict[int | str, tuple[int, ...]]:
        """Identifier -> sorted debug handles."""
        return {k: tuple(sorted(v)) for k, v in self._map.items()}
