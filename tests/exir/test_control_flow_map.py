"""``torch.map`` compiles to a loop, as ExecuTorch writes it, and runs on both runtimes like eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from functorch.experimental.control_flow import map as torch_map

from edgetorch.exir import to_edge
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime


def _scaled_add(row, bias, scale):
    return torch.relu(row * scale + bias)


class MapModel(torch.nn.Module):
    def forward(self, xs, bias, scale):
        return torch_map(_scaled_add, xs, bias, scale) + 1.0


class NestedMap(torch.nn.Module):
    def forward(self, xs, y):
        return torch_map(lambda row, b: torch_map(lambda v, c: v * c, row, b), xs, y)


def _inputs(rows: int = 5) -> tuple:
    g = torch.Generator().manual_seed(0)
    return torch.randn(rows, 4, generator=g), torch.randn(4, generator=g), torch.randn(4, generator=g)


def test_map_is_a_loop_that_runs_like_eager_every_time():
    args = _inputs()
    buffer = to_edge(torch.export.export(MapModel(), args)).to_executorch().buffer
    plan = load_pte(buffer).program.execution_plan[0]
    names = {op.name for op in plan.operators}
    assert {"aten::select_copy", "executorch_prim::et_copy_index", "executorch_prim::eq"} <= names
    method = Runtime.get().load_program(buffer).load_method("forward")
    for _ in range(2):  # the loop counter starts over on each run
        got = method.execute([a.numpy() for a in args])
        np.testing.assert_allclose(got[0], MapModel()(*args).numpy(), rtol=1e-6, atol=1e-6)


def test_nested_maps():
    args = (torch.randn(3, 2, 4), torch.randn(2, 4))
    buffer = to_edge(torch.export.export(NestedMap(), args)).to_executorch().buffer
    got = Runtime.get().load_program(buffer).load_method("forward").execute([a.numpy() for a in args])
    np.testing.assert_allclose(got[0], NestedMap()(*args).numpy(), rtol=1e-6, atol=1e-6)


def test_executorch_runs_our_map():
    pytest.importorskip("executorch")
    from tests.oracle import run_executorch_calls

    args = _inputs()
    buffer = to_edge(torch.export.export(MapModel(), args)).to_executorch().buffer
    for got in run_executorch_calls(buffer, [[a.numpy() for a in args]] * 2):
        np.testing.assert_allclose(got[0], MapModel()(*args).numpy(), rtol=1e-6, atol=1e-6)
