"""What delegation did to a program: ``get_delegation_info`` as in ExecuTorch's ``devtools.backend_debug``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import torch

from edgetorch.devtools.extras import require

_TRAILING_INDEX = re.compile(r"_\d+$")


@dataclass
class DelegationBreakdown:
    op_type: str = ""
    delegated: int = 0
    non_delegated: int = 0


@dataclass
class DelegationInfo:
    num_delegated_subgraphs: int
    num_delegated_nodes: int
    num_non_delegated_nodes: int
    delegation_by_operator: dict[str, DelegationBreakdown] = field(default_factory=dict)

    def get_summary(self) -> str:
        return (
            f"Total delegated subgraphs: {self.num_delegated_subgraphs}\n"
            f"Number of delegated nodes: {self.num_delegated_nodes}\n"
            f"Number of non-delegated nodes: {self.num_non_delegated_nodes}\n"
        )

    def get_operator_delegation_dataframe(self) -> Any:
        """One row per operator (sorted), then a ``Total`` row (pandas)."""
        pd = require("pandas", "get_operator_delegation_dataframe")

        rows = [[op, b.delegated, b.non_delegated] for op, b in sorted(self.delegation_by_operator.items())]
        rows.append(["Total", self.num_delegated_nodes, self.num_non_delegated_nodes])
        return pd.DataFrame(
            rows, columns=["op_type", "occurrences_in_delegated_graphs", "occurrences_in_non_delegated_graphs"]
        )


def get_delegation_info(graph_module: torch.fx.GraphModule) -> DelegationInfo:
    """Count the operator nodes left in ``graph_module`` and those each delegate took over.

    An operator is counted by its node's name without a trailing ``_<n>`` (``aten_convolution_default_3``
    counts as ``aten_convolution_default``); ``getitem`` nodes count too (they read a delegate's outputs).
    """
    by_op: dict[str, DelegationBreakdown] = {}

    def count(node: torch.fx.Node, delegated: bool) -> None:
        op = _TRAILING_INDEX.sub("", node.name)
        entry = by_op.setdefault(op, DelegationBreakdown(op_type=op))
        if delegated:
            entry.delegated += 1
        else:
            entry.non_delegated += 1

    subgraphs = 0
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and "executorch_call_delegate" not in str(node.target):
            count(node, False)
        elif node.op == "get_attr" and node.target.startswith("lowered_module"):
            subgraphs += 1
            lowered = getattr(graph_module, node.target)
            for inner in lowered.original_module.graph.nodes:
                if inner.op == "call_function":
                    count(inner, True)
    return DelegationInfo(
        num_delegated_subgraphs=subgraphs,
        num_delegated_nodes=sum(b.delegated for b in by_op.values()),
        num_non_delegated_nodes=sum(b.non_delegated for b in by_op.values()),
        delegation_by_operator=by_op,
    )


def print_delegation_info(graph_module: torch.fx.GraphModule) -> None:
    tabulate = require("tabulate", "print_delegation_info").tabulate

    info = get_delegation_info(graph_module)
    print(info.get_summary())
    print(tabulate(info.get_operator_delegation_dataframe(), headers="keys", tablefmt="fancy_grid"))
