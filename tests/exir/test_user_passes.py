"""A user pass that returns a new graph module (``PassResult``) changes the program that is emitted and run."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgetorch.exir import ExecutorchBackendConfig, to_edge
from edgetorch.exir.dialects._ops import exir_ops
from edgetorch.exir.pass_base import ExportPass, PassResult
from edgetorch.runtime import Runtime

edge = exir_ops.edge.aten


class AddThenScale(torch.nn.Module):
    def forward(self, x, y):
        return (x + y) * 2.0


class AddToSub(ExportPass):
    """Rewrites every ``add.Tensor`` into ``sub.Tensor``; ExportPass re-traces into a new graph module."""

    def call_operator(self, op, args, kwargs, meta):
        if op == edge.add.Tensor:
            op = edge.sub.Tensor
        return super().call_operator(op, args, kwargs, meta)


class AddToSubOnACopy:
    """A plain callable that edits a copy and returns it, leaving the module it was given unchanged."""

    def __call__(self, gm: torch.fx.GraphModule) -> PassResult:
        new = copy.deepcopy(gm)
        for node in new.graph.nodes:
            if node.target == edge.add.Tensor:
                node.target = edge.sub.Tensor
        new.recompile()
        return PassResult(new, True)


def _run(buffer: bytes, *inputs: torch.Tensor) -> tuple[list[str], np.ndarray]:
    method = Runtime().load_program(buffer).load_method("forward")
    return method.operators, method.execute([t.numpy() for t in inputs])[0]


@pytest.mark.parametrize("user_pass", [AddToSub, AddToSubOnACopy], ids=["ExportPass", "returns-a-copy"])
@pytest.mark.parametrize("where", ["to_executorch", "transform"])
def test_the_graph_a_pass_returns_is_the_one_emitted(user_pass, where):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    manager = to_edge(torch.export.export(AddThenScale(), (x, y)))
    if where == "transform":
        program = manager.transform([user_pass()]).to_executorch()
    else:
        program = manager.to_executorch(ExecutorchBackendConfig(passes=[user_pass()]))
    operators, out = _run(program.buffer, x, y)
    assert "aten::sub.out" in operators and "aten::add.out" not in operators
    np.testing.assert_allclose(out, ((x - y) * 2.0).numpy(), rtol=1e-6)
    assert edge.add.Tensor in [n.target for n in manager.exported_program().graph.nodes]
