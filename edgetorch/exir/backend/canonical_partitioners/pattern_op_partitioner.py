"""Partitions from an operator-support rule, graph patterns, or given node lists. May import torch.

Each partition is the largest connected set of accepted nodes that can become one delegate
(torch's capability-based partitioner, single-node partitions allowed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition
from torch.fx.passes.operator_support import OperatorSupportBase, any_chain
from torch.fx.passes.utils.matcher_utils import SubgraphMatcher

__all__ = ["generate_partitions_from_list_of_nodes", "generate_pattern_op_partitions"]


class _Listed(OperatorSupportBase):
    """Accepts exactly the nodes it was given."""

    def __init__(self, nodes: Iterable[torch.fx.Node]) -> None:
        self.nodes = set(nodes)

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        return node in self.nodes


def _partitions(
    graph_module: torch.fx.GraphModule, listed: set[torch.fx.Node], op_support: OperatorSupportBase | None
) -> list[Partition]:
    if op_support is None and not listed:
        raise ValueError("nothing to partition with: give op_support, patterns that match, or lists of nodes")
    support = _Listed(listed) if op_support is None else any_chain(op_support, _Listed(listed))
    return CapabilityBasedPartitioner(graph_module, support, allows_single_node_partition=True).propose_partitions()


def generate_partitions_from_list_of_nodes(
    graph_module: torch.fx.GraphModule,
    pattern_list: list[list[torch.fx.Node]] | None = None,
    op_support: OperatorSupportBase | None = None,
) -> list[Partition]:
    """Partitions of the nodes of ``pattern_list`` together with those ``op_support`` accepts."""
    return _partitions(graph_module, {n for nodes in pattern_list or [] for n in nodes}, op_support)


def generate_pattern_op_partitions(
    graph_module: torch.fx.GraphModule,
    patterns: list[torch.fx.Graph] | None = None,
    partitions_list: list[list[torch.fx.Node]] | None = None,
    op_support: OperatorSupportBase | None = None,
    ignore_literals: bool = False,
) -> list[Partition]:
    """The largest partitions of nodes that ``op_support`` accepts, that match one of ``patterns``
    (its computing nodes; its inputs stay outside), or that ``partitions_list`` names.

    ``ignore_literals`` lets a pattern's constant arguments match any value.
    """
    listed = {n for nodes in partitions_list or [] for n in nodes}
    for pattern in patterns or []:
        for match in SubgraphMatcher(pattern, ignore_literals=ignore_literals).match(graph_module.graph):
            listed.update(
                found
                for in_pattern, found in match.nodes_map.items()
                if in_pattern.op not in ("placeholder", "output") and found.op != "placeholder"
            )
    return _partitions(graph_module, listed, op_support)
