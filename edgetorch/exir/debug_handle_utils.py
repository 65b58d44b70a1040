"""Debug handles: the meta keys, and which node of the user's exported graph a node descends from.

A debug handle (``node.meta[DEBUG_HANDLE_KEY]``) ties an emitted instruction to the Edge node(s)
it came from; nodes made from one node of the user's graph share a handle. Torch records that
descent in ``node.meta[FROM_NODE_KEY]``. May import torch.
"""

from __future__ import annotations

import torch

__all__ = [
    "DEBUG_HANDLE_KEY",
    "FROM_NODE_KEY",
    "UNSET_DEBUG_HANDLE",
    "ancestor_identifier",
    "get_greatest_ancestor_node_identifier",
]

DEBUG_HANDLE_KEY = "debug_handle"
FROM_NODE_KEY = "from_node"
UNSET_DEBUG_HANDLE = 0
"""The handle of an instruction that maps to no node."""


def ancestor_identifier(node: torch.fx.Node) -> str | None:
    """``"<name>.<graph id>"`` of the oldest recorded ancestor of ``node``; None when torch recorded none."""
    sources = node.meta.get(FROM_NODE_KEY)
    if not sources:
        return None
    source = sources[-1]
    while source.from_node:
        source = source.from_node[-1]
    return f"{source.name}.{source.graph_id}"


def get_greatest_ancestor_node_identifier(node: torch.fx.Node) -> str:
    """:func:`ancestor_identifier`, for a node that must have one (KeyError names the node otherwise)."""
    identifier = ancestor_identifier(node)
    if identifier is None:
        raise KeyError(f"node {node.name} has no {FROM_NODE_KEY!r} record; it was not made by torch.export or a pass")
    return identifier
