"""Helpers around delegated graphs: printing them with their delegates, delegate debug maps, tagging state.

``format_delegated_graph`` shows a graph and, under each ``lowered_module_N``,
the backend and the Edge graph it took. ``DelegateMappingBuilder`` builds the
``debug_handle_map`` a backend returns from ``preprocess`` (delegate-internal
identifier -> debug handles of the Edge nodes it covers). ``tag_constant_data`` and
``tag_mutated_buffer`` let a partitioner hand a delegate the weights and the mutable
buffers its nodes use. May import torch.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.export import ExportedProgram

from edgetorch.exir.backend.delegate import is_lowered_module
from edgetorch.exir.backend.partition_utils import TAG, tag_constant_data

__all__ = [
    "DelegateMappingBuilder",
    "format_delegated_graph",
    "get_delegates",
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
