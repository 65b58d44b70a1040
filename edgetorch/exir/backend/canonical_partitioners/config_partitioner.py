"""A partitioner built from per-op configs, each saying which nodes of one op go with it. May import torch.

A ``PartitionerConfig`` names its op (``target_name``, without namespace: ``"linear.default"``),
checks whether a node of that op can be delegated, and returns the nodes that must go with it
(its weights, a dequantize feeding it, ...). ``ConfigerationBasedPartitioner`` (ExecuTorch's
spelling) joins overlapping groups and makes the largest delegable partitions of them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable

import torch
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import Partition

from edgetorch.exir.backend.canonical_partitioners.all_node_partitioner import is_non_tensor_placeholder
from edgetorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
    generate_partitions_from_list_of_nodes,
)
from edgetorch.exir.backend.partition_utils import TAG
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult

__all__ = ["ConfigerationBasedPartitioner", "PartitionerConfig", "format_target_name", "is_constant_data"]


def is_constant_data(ep: ExportedProgram, node: torch.fx.Node) -> bool:
    """True for a placeholder holding a weight, buffer or constant of ``ep``."""
    return node.op == "placeholder" and not is_non_tensor_placeholder(node, ep)


def format_target_name(target_name: str) -> str:
    """An op's name without its namespace: ``"aten.add.Tensor"`` -> ``"add.Tensor"``."""
    names = target_name.split(".")
    return ".".join(names[1:] if len(names) > 2 else names)


class PartitionerConfig(ABC):
    """How one op is delegated; set ``target_name`` (e.g. ``"add.Tensor"``) on the subclass."""

    target_name: str

    @abstractmethod
    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        """Whether this node of the op can be delegated."""

    @abstractmethod
    def get_original_aten(self) -> torch._ops.OpOverload | None:
        """The ATen op to keep whole through decomposition (``to_edge_transform_and_lower``), if any."""

    @abstractmethod
    def get_partition(self, node: torch.fx.Node, ep: ExportedProgram) -> list[torch.fx.Node]:
        """The node and the nodes that must be delegated with it; empty when it cannot be."""


class ConfigerationBasedPartitioner(Partitioner):
    """Delegates to ``delegation_spec`` the nodes its configs accept, with the nodes each config adds."""

    def __init__(self, delegation_spec: DelegationSpec, partitioner_configs: Iterable[PartitionerConfig]) -> None:
        super().__init__()
        self.delegation_spec = delegation_spec
        self.target_partitioner_configs: dict[str, PartitionerConfig] = {}
        for config in partitioner_configs:
            other = self.target_partitioner_configs.setdefault(config.target_name, config)
            if other is not config:
                raise ValueError(
                    f"configs {type(other).__name__} and {type(config).__name__} both claim {config.target_name!r}; "
                    "give each op one config"
                )

    def _config(self, node: torch.fx.Node) -> PartitionerConfig | None:
        if node.op != "call_function":
            return None
        return self.target_partitioner_configs.get(format_target_name(getattr(node.target, "__name__", "")))

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        """Each config's original ATen op, kept whole where that config accepts the node."""

        def accept(node: torch.fx.Node) -> bool:
            config = self._config(node)
            return config is not None and config.get_original_aten() is not None and config.check_constraints(node, ep)

        kept = [c.get_original_aten() for c in self.target_partitioner_configs.values()]
        return [op for op in kept if op is not None], accept

    def get_matched_nodes_from_configs(self, ep: ExportedProgram) -> list[list[torch.fx.Node]]:
        """The groups of nodes the configs accept; groups sharing an operator node are joined."""
        parent: dict[torch.fx.Node, torch.fx.Node] = {}

        def root(node: torch.fx.Node) -> torch.fx.Node:
            while parent.setdefault(node, node) is not node:
                node = parent[node]
            return node

        for node in ep.graph.nodes:
            config = self._config(node)
            if config is None or not config.check_constraints(node, ep):
                continue
            # A weight already claimed by one group joins no other (the groups would share it).
            group = [n for n in config.get_partition(node, ep) if not (is_constant_data(ep, n) and n in parent)]
            for member in group[1:]:
                parent[root(member)] = root(group[0])
            if group:
                root(group[0])
        groups: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for node in parent:
            groups.setdefault(root(node), []).append(node)
        return list(groups.values())

    def generate_partitions(self, ep: ExportedProgram) -> list[Partition]:
        return generate_partitions_from_list_of_nodes(ep.graph_module, self.get_matched_nodes_from_configs(ep))

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags = {}
        for partition in self.generate_partitions(exported_program):
            tag = f"tag{partition.id}"
            for node in partition.nodes:
                node.meta[TAG] = tag
            tags[tag] = self.delegation_spec
        return PartitionResult(exported_program, tags)
