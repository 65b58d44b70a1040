"""The demo backend's other partitioners, as ExecuTorch's backend tests and docs use them.

* ``AddAttributePartitionerDemo`` delegates connected ``add`` chains together with the
  parameters, buffers and constants they read (a delegate that owns its weights);
* ``AllNodesPartitionerDemo`` does the same with every operator call, for the backend named ``ExecutorBackend``;
* ``NonDecompTestPartitioner`` keeps ``linear`` (with a bias), ``scaled_dot_product_attention`` and
  ``upsample_nearest2d`` whole through ``to_edge_transform_and_lower`` and gives each such node a
  delegate of its own.

The operator supports they are built from (``AddOperatorSupport``, ...) are ``torch.fx`` operator
supports, usable with ``any_chain``. Both partitioners target ``BackendWithCompilerDemo``. May import torch.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import Partition
from torch.fx.passes.operator_support import OperatorSupportBase, any_chain

from edgetorch.backends.demo.runtime import BACKEND_ID
from edgetorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.graph_module import get_control_flow_submodules

__all__ = [
    "AddAttributePartitionerDemo",
    "AllNodesPartitionerDemo",
    "AddOperatorSupport",
    "AllOperatorSupport",
    "MatmulOperatorSupport",
    "NonDecompTestPartitioner",
    "OpsToNotDecomposeOperatorSupport",
    "edge_ops_non_decomposed",
    "ops_not_to_decompose",
]

aten = torch.ops.aten

EXECUTOR_BACKEND_ID = "ExecutorBackend"

ops_not_to_decompose: list[torch._ops.OpOverload] = [
    aten.linear.default,
    aten.scaled_dot_product_attention.default,
    aten.upsample_nearest2d.vec,
]
"""The ATen ops NonDecompTestPartitioner asks to_edge_transform_and_lower to keep whole."""

edge_ops_non_decomposed = [
    exir_ops.edge.aten.linear.default,
    exir_ops.edge.aten.scaled_dot_product_attention.default,
    exir_ops.edge.aten.upsample_nearest2d.vec,
]
"""The same ops in the Edge dialect, as they appear after lowering."""


class _TargetSupport(OperatorSupportBase):
    """Supports the call_function nodes whose target is one of ``targets`` (every one when None)."""

    targets: tuple | None = None

    def is_node_supported(self, submodules: object, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and (self.targets is None or node.target in self.targets)


class AllOperatorSupport(_TargetSupport):
    """Every operator call."""


class AddOperatorSupport(_TargetSupport):
    """Edge ``add.Tensor`` only."""

    targets = (exir_ops.edge.aten.add.Tensor,)


class MatmulOperatorSupport(_TargetSupport):
    """Edge ``mm`` only."""

    targets = (exir_ops.edge.aten.mm.default,)


class OpsToNotDecomposeOperatorSupport(_TargetSupport):
    """The Edge ops NonDecompTestPartitioner keeps whole."""

    targets = tuple(edge_ops_non_decomposed)


def _tag(node: torch.fx.Node, tag: str) -> None:
    node.meta["delegation_tag"] = tag


def _is_constant_input(program: ExportedProgram, node: torch.fx.Node) -> bool:
    """A get_attr, or a placeholder the program feeds from a parameter, buffer or lifted constant."""
    if node.op == "get_attr":
        return True
    return node.op == "placeholder" and (
        is_param(program, node) or is_buffer(program, node) or is_lifted_tensor_constant(program, node)
    )


class _PartitionerWithConstants(Partitioner):
    """Delegates the largest connected groups of nodes ``op_support`` accepts, with the constant tensors
    (parameters, buffers, lifted constants) their nodes read, so the delegate, not the program, holds them."""

    op_support: OperatorSupportBase
    delegation_spec: DelegationSpec

    def partition(self, edge_exported_program: ExportedProgram) -> PartitionResult:
        tags: dict[str, DelegationSpec] = {}
        partitions = generate_pattern_op_partitions(edge_exported_program.graph_module, op_support=self.op_support)
        for partition in partitions:
            tag = f"tag{partition.id}"
            tags[tag] = self.delegation_spec
            for node in partition.nodes:
                _tag(node, tag)
                for arg in node.args:
                    if isinstance(arg, torch.fx.Node) and _is_constant_input(edge_exported_program, arg):
                        _tag(arg, tag)
        return PartitionResult(tagged_exported_program=edge_exported_program, partition_tags=tags)


class AddAttributePartitionerDemo(_PartitionerWithConstants):
    """Each connected chain of ``add``, with the weights it reads, to BackendWithCompilerDemo."""

    def __init__(self) -> None:
        super().__init__()
        self.op_support = AddOperatorSupport()
        self.delegation_spec = DelegationSpec(BACKEND_ID, [])


class AllNodesPartitionerDemo(_PartitionerWithConstants):
    """Every operator call, with the weights it reads, to the backend named ``ExecutorBackend``.

    That backend is ExecuTorch's test backend that runs its payload as a nested program; lowering
    with this partitioner needs a ``BackendDetails`` subclass of that name to be defined.
    """

    def __init__(self) -> None:
        super().__init__()
        self.op_support = AllOperatorSupport()
        self.delegation_spec = DelegationSpec(EXECUTOR_BACKEND_ID, [])


class NonDecompTestPartitioner(Partitioner):
    """Keeps ``linear`` with a bias, ``scaled_dot_product_attention`` and ``upsample_nearest2d`` from being
    decomposed and delegates each such node alone, in control-flow branches too."""

    def __init__(self) -> None:
        super().__init__()
        self.supported_non_decomposed_edge_ops = edge_ops_non_decomposed
        self.op_support = any_chain(OpsToNotDecomposeOperatorSupport())
        self.delegation_spec = DelegationSpec(BACKEND_ID, [CompileSpec("max_value", bytes([4]))])

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        def keep(node: torch.fx.Node) -> bool:
            # only a linear with its bias stays whole; a bias-free one decomposes as usual
            if node.op == "call_function" and node.target in ops_not_to_decompose:
                return len(node.args) == 3
            return True

        return list(ops_not_to_decompose), keep

    def _single_node_partitions(self, graph_module: torch.fx.GraphModule) -> list[Partition]:
        nodes = [
            n
            for n in graph_module.graph.nodes
            if n.op == "call_function" and n.target in self.supported_non_decomposed_edge_ops
        ]
        return [Partition(nodes=[n], id=i) for i, n in enumerate(nodes)]

    def _partition_graph_module(self, graph_module: torch.fx.GraphModule) -> dict[str, DelegationSpec]:
        tags: dict[str, DelegationSpec] = {}
        for partition in self._single_node_partitions(graph_module):
            tag = f"tag{partition.id}"
            for node in partition.nodes:
                _tag(node, tag)
            tags[tag] = self.delegation_spec
        for _, submodule, _ in get_control_flow_submodules(graph_module):
            tags.update(self._partition_graph_module(submodule))
        return tags

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        tags = self._partition_graph_module(exported_program.graph_module)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)
