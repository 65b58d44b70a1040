"""XnnpackPartitioner + XnnpackBackend: lowered programs run on edgetorch's runtime and match eager.

Each model is exported, lowered with ``to_edge_transform_and_lower(ep,
partitioner=[XnnpackPartitioner()])`` and run by ``edgetorch.runtime`` (whose
XNNPACK runtime half executes the blob). The same programs run on the real
ExecuTorch in ``tests/interop/test_xnnpack_interop.py``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn as nn

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime
from tests.oracle import assert_close, eager


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


@dataclass
class Case:
    make: Any
    inputs: tuple
    dynamic_shapes: Any = None
    delegates: int = 1
    undelegated: tuple = ()  # op names expected outside the delegates
    compare_blobs: bool = True  # ExecuTorch's lowering of the model has the same heavy nodes and externals


CASES = {
    "mlp": Case(MLP, (torch.randn(3, 16),)),
}


@dataclass
class Lowered:
    model: nn.Module
    inputs: tuple
    graph: torch.fx.Graph
    pte: bytes


@functools.lru_cache(maxsize=None)
def lowered(name: str) -> Lowered:
    """Lower case ``name`` once per session (the ExecuTorch interop tests reuse it)."""
    case = CASES[name]
    torch.manual_seed(0)
    model = case.make().eval()
    ep = torch.export.export(model, case.inputs, dynamic_shapes=case.dynamic_shapes, strict=False)
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    graph = edge.exported_program().graph
    return Lowered(model, case.inputs, graph, edge.to_executorch().buffer)


def node_counts(graph: torch.fx.Graph) -> tuple[int, list[str]]:
    """Delegate calls, and the names of the other operator nodes (getitems of delegate outputs excluded)."""
    calls = [n for n in graph.nodes if n.op == "call_function"]
    delegates = sum(1 for n in calls if n.target.__name__ == "executorch_call_delegate")
    others = [
        str(getattr(n.target, "_op", n.target)).removeprefix("aten.")
        for n in calls
        if n.target.__name__ not in ("executorch_call_delegate", "getitem")
    ]
    return delegates, others


def run_edgetorch(pte: bytes, inputs: list) -> list:
    method = Runtime.get().load_program(pte).load_method("forward")
    return method.execute([np.asarray(x) for x in inputs])


@pytest.mark.parametrize("name", sorted(CASES))
def test_lowered_program_matches_eager(name):
    case, low = CASES[name], lowered(name)
    delegates, others = node_counts(low.graph)
    assert delegates == case.delegates, f"{delegates} delegates; undelegated: {others}"
    assert sorted({o.split(".")[0] for o in others}) == sorted(case.undelegated)
    got = run_edgetorch(low.pte, [x.numpy() for x in low.inputs])
    assert_close(got, eager(low.model, low.inputs), rtol=1e-4, atol=1e-4)
