"""The demo partitioners where ExecuTorch's tutorial and backend tests import them (defined in
``edgetorch.backends.demo``)."""

from edgetorch.backends.demo.compiler import AddMulPartitionerDemo
from edgetorch.backends.demo.partitioners import (
    AddAttributePartitionerDemo,
    AddOperatorSupport,
    AllNodesPartitionerDemo,
    AllOperatorSupport,
    MatmulOperatorSupport,
    NonDecompTestPartitioner,
    OpsToNotDecomposeOperatorSupport,
    edge_ops_non_decomposed,
    ops_not_to_decompose,
)

__all__ = [
    "AddAttributePartitionerDemo",
    "AllNodesPartitionerDemo",
    "AddMulPartitionerDemo",
    "AddOperatorSupport",
    "AllOperatorSupport",
    "MatmulOperatorSupport",
    "NonDecompTestPartitioner",
    "OpsToNotDecomposeOperatorSupport",
    "edge_ops_non_decomposed",
    "ops_not_to_decompose",
]
