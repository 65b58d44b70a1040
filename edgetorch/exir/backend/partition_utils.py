"""Tagging helpers for partitioners: group supported nodes, tag them, check a tag can be cut out.

A partition is cut out of the graph into one delegate call, so it must be
convex: no path may leave the partition through an undelegated node and come
back in (the delegate would need its own output as an input). Grouping here
never builds such a partition, and ``check_partition`` names the nodes when a
hand-made tagging does. May import torch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgetorch.errors import EdgetorchError

__all__ = [
    "COPIES",
    "TAG",
    "PartitionCycleError",
    "check_partition",
    "group_supported_nodes",
    "nodes_by_tag",
    "tag_constant_data",
    "tag_partitions",
]

TAG = "delegation_tag"
COPIES = "delegation_tag_copies"
"""On a constant: the tags of the partitions that take their own copy of it (see ``tag_constant_data``)."""

Node = torch.fx.Node


class PartitionCycleError(EdgetorchError, RuntimeError):
    """A delegation tag marks nodes that cannot become one delegate call without a dependency cycle."""


def nodes_by_tag(graph_module: torch.fx.GraphModule) -> dict[str, list[Node]]:
    """Tag -> the tagged nodes of the top-level graph, in graph order (tags ordered by first node)."""
    groups: dict[str, list[Node]] = {}
    for node in graph_module.graph.nodes:
        tag = node.meta.get(TAG)
        if tag is not None:
            groups.setdefault(tag, []).append(node)
    return groups


def find_cycle(nodes: Iterable[Node]) -> list[Node] | None:
    """Undelegated nodes on a path that leaves ``nodes`` and re-enters them, or None if there is none.

    The path is returned from the first node outside to the last, followed by
    the partition node it re-enters.
    """
    inside = set(nodes)
    came_from: dict[Node, Node | None] = {}
    queue: deque[Node] = deque()
    for node in inside:
        for user in node.users:
            if user not in inside and user not in came_from:
                came_from[user] = None
                queue.append(user)
    while queue:
        node = queue.popleft()
        for user in node.users:
            if user in inside:
                return [*_path_to(node, came_from), user]
            if user not in came_from:
                came_from[user] = node
                queue.append(user)
    return None


def _path_to(node: Node, came_from: dict[Node, Node | None]) -> list[Node]:
    path = [node]
    while came_from[path[-1]] is not None:
        path.append(came_from[path[-1]])
    return path[::-1]


def check_partition(nodes: Iterable[Node], tag: str) -> None:
    """Raise PartitionCycleError if the nodes tagged ``tag`` cannot be fused into one delegate call."""
    cycle = find_cycle(nodes)
    if cycle is None:
        return
    *outside, back = cycle
    names = " -> ".join(n.name for n in outside)
    raise PartitionCycleError(
        f"partition {tag!r} cannot be lowered as one delegate: its output flows through the undelegated "
        f"node(s) {names} and back into its node {back.name}, so the delegate would depend on itself. "
        f"Tag those nodes {tag!r} too, or split the partition at {back.name} into two tags."
    )


def group_supported_nodes(graph_module: torch.fx.GraphModule, is_supported: Callable[[Node], bool]) -> list[list[Node]]:
    """Group the ``call_function`` nodes for which ``is_supported`` holds into connected, cycle-free partitions.

    Nodes are visited in graph order; each joins the partitions of its supported
    producers when the union stays convex, else the first of them it can join,
    else starts a new partition. Partitions come back in graph order.
    """
    group_of: dict[Node, list[Node]] = {}
    groups: list[list[Node]] = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or not is_supported(node):
            continue
        producers = _unique(group_of[a] for a in node.all_input_nodes if a in group_of)
        group = _join(node, producers)
        if group is None:
            group = [node]
            groups.append(group)
        for member in group:
            group_of[member] = group
        groups = [g for g in groups if group_of[g[0]] is g]
    order = {n: i for i, n in enumerate(graph_module.graph.nodes)}
    return [sorted(g, key=order.__getitem__) for g in groups]


def _join(node: Node, producers: list[list[Node]]) -> list[Node] | None:
    """The producer group ``node`` joins (merged with the others if possible), or None."""
    merged = [m for g in producers for m in g] + [node]
    if len(producers) > 1 and find_cycle(merged) is None:
        producers[0][:] = merged
        return producers[0]
    for group in producers:
        if find_cycle([*group, node]) is None:
            group.append(node)
            return group
    return None


def _unique(groups: Iterable[list[Node]]) -> list[list[Node]]:
    seen: dict[int, list[Node]] = {}
    for g in groups:
        seen.setdefault(id(g), g)
    return list(seen.values())


def tag_partitions(partitions: Iterable[list[Node]], prefix: str = "tag") -> list[str]:
    """Set ``delegation_tag`` = ``f"{prefix}{i}"`` on the nodes of the i-th partition; returns the tags."""
    tags = []
    for i, nodes in enumerate(partitions):
        tag = f"{prefix}{i}"
        for node in nodes:
            node.meta[TAG] = tag
        tags.append(tag)
    return tags


def tag_constant_data(program: ExportedProgram, copy_shared: bool = False) -> None:
    """Tag each parameter, buffer and constant whose users all carry one tag, so that delegate owns it.

    A constant that a partition shares with other users (a token table tied to the output projection) is an
    input of the delegate, handed over at every call; with ``copy_shared`` each partition reading it owns a
    copy instead (its tag goes into ``COPIES``), and a writer that stores identical bytes once
    (``share_identical_data``) keeps the file the same size. Buffers the program mutates stay with the program.
    """
    signature = program.graph_signature
    owned_kinds = {InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR}
    mutated = set(signature.buffers_to_mutate.values())
    constant_names = {s.arg.name for s in signature.input_specs if s.kind in owned_kinds and s.target not in mutated}
    for node in program.graph.nodes:
        if node.op != "placeholder" or node.name not in constant_names or not node.users:
            continue
        tags = {user.meta.get(TAG) for user in node.users}
        if len(tags) == 1 and None not in tags:
            node.meta[TAG] = tags.pop()
        elif copy_shared and tags - {None}:
            node.meta[COPIES] = tags - {None}
