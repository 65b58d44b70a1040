"""``Partitioner``, ``PartitionResult`` and ``DelegationSpec``: how a backend claims parts of a graph.

A partitioner tags the nodes a backend should run (``node.meta["delegation_tag"]``)
and says, per tag, which backend and compile specs lower them. ``to_backend``
then cuts each tag out into a delegate. May import torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import torch
from torch.export import ExportedProgram

from edgetorch.exir.backend.compile_spec_schema import CompileSpec

__all__ = ["DelegationSpec", "PartitionResult", "Partitioner"]


class DelegationSpec(NamedTuple):
    """The backend (by id) and compile specs that lower one partition tag."""

    backend_id: str
    compile_specs: list[CompileSpec]


@dataclass
class PartitionResult:
    """A partitioner's answer: the program with nodes tagged, and tag -> DelegationSpec."""

    tagged_exported_program: ExportedProgram
    partition_tags: dict[str, DelegationSpec]


class Partitioner(ABC):
    """Decides which nodes of an Edge program go to which backend.

    ``partition`` may only set ``node.meta["delegation_tag"]`` on nodes (operator
    nodes, and the constant placeholders the delegate should own); it must not
    change the graph. Each tag must name a connected group of nodes that can be
    cut out without creating a cycle.

    ``spec`` holds a subclass's settings (read back through the ``spec`` property).
    """

    def __init__(self, spec: Mapping[str | int | float | bool, object] = MappingProxyType({})) -> None:
        self._spec = spec

    @property
    def spec(self) -> Mapping[str | int | float | bool, object]:
        """The settings this partitioner was made with."""
        return getattr(self, "_spec", MappingProxyType({}))

    def __call__(self, exported_program: ExportedProgram) -> PartitionResult:
        return self.partition(exported_program)

    @abstractmethod
    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        """Tag the nodes to delegate and return them with each tag's DelegationSpec."""

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        """ATen ops this backend wants to see whole, and an optional per-node filter.

        ``to_edge_transform_and_lower`` keeps these ops out of the Core ATen
        decomposition; a node of such an op is still decomposed when the filter
        returns False for it. The default keeps nothing.
        """
        return [], None
