"""Lowering a whole ``cond`` (its branch subgraphs included) leaves no outer partition tag in the delegate's program.

A backend whose ``preprocess`` partitions its program again (ExecuTorch's nested-backend test) needs the
program it is given to be untagged.
"""

from __future__ import annotations

import torch
from torch.export import export

from edgetorch.exir import to_edge
from edgetorch.exir.backend.backend_api import to_backend
from edgetorch.exir.backend.partition_utils import TAG
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from tests.exir.test_delegation import NoRuntimeDemo  # noqa: F401  (registers the backend)


class Branchy(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t * 2, (x,))


class TagCond(Partitioner):
    """Tags each cond and the get_attr nodes of its branches, as ExecuTorch's Backend1PartitionerDemo does."""

    def partition(self, exported_program):
        for node in exported_program.graph.nodes:
            if node.op == "call_function" and node.target is torch.ops.higher_order.cond:
                for part in (node, node.args[1], node.args[2]):
                    part.meta[TAG] = "outer"
        return PartitionResult(exported_program, {"outer": DelegationSpec("NoRuntimeDemo", [])})


def test_lowered_cond_program_carries_no_outer_tag() -> None:
    program = to_edge(export(Branchy(), (torch.ones(3),))).exported_program()
    lowered = to_backend(program, TagCond()).graph_module.lowered_module_0.original_module
    tagged = [n.name for n in lowered.graph.nodes if TAG in n.meta]
    assert tagged == []
    assert any(n.op == "get_attr" for n in lowered.graph.nodes)
