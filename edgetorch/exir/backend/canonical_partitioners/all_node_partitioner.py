"""``AllNodePartitioner``: give a whole program, weights included, to one backend. May import torch."""

from __future__ import annotations

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.partition_utils import TAG
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult

__all__ = ["AllNodePartitioner", "is_non_tensor_placeholder"]

_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


def is_non_tensor_placeholder(node: torch.fx.Node, ep: ExportedProgram) -> bool:
    """True for a placeholder that is not a weight, buffer or constant of ``ep`` (a user input)."""
    constants = {s.arg.name for s in ep.graph_signature.input_specs if s.kind in _CONSTANT_KINDS}
    return node.op == "placeholder" and node.name not in constants


class AllNodePartitioner(Partitioner):
    """Tags every operator and every constant with one tag, the backend id: the backend takes it all."""

    def __init__(self, backend_id: str, compile_specs: list[CompileSpec]) -> None:
        super().__init__()
        self.delegation_spec = DelegationSpec(backend_id, list(compile_specs))

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tag = self.delegation_spec.backend_id
        for node in exported_program.graph.nodes:
            if node.op != "output" and not is_non_tensor_placeholder(node, exported_program):
                node.meta[TAG] = tag
        return PartitionResult(exported_program, {tag: self.delegation_spec})
