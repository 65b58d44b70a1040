"""``torch.map`` and ``torch.scan`` compile to loops, as ExecuTorch writes them, and run on both runtimes like
eager."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from functorch.experimental.control_flow import map as torch_map
from torch._higher_order_ops.scan import scan

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


class RNN(torch.nn.Module):
    """A carry through the rows, and every step's output stacked."""

    def forward(self, h0, xs, w):
        def step(h, x):
            h = torch.tanh(h @ w + x)
            return h, h * 2.0

        return scan(step, h0, xs)


def _rnn_inputs(steps: int = 5) -> tuple:
    g = torch.Generator().manual_seed(1)
    return torch.zeros(2, 3), torch.randn(steps, 2, 3, generator=g), torch.randn(3, 3, generator=g)


def test_scan_carries_and_stacks_like_eager_every_time():
    args = _rnn_inputs()
    buffer = to_edge(torch.export.export(RNN(), args)).to_executorch().buffer
    method = Runtime.get().load_program(buffer).load_method("forward")
    want = [t.numpy() for t in RNN()(*args)]
    for _ in range(2):
        got = method.execute([a.numpy() for a in args])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_executorch_runs_our_scan():
    pytest.importorskip("executorch")
    from tests.oracle import run_executorch_calls

    args = _rnn_inputs()
    buffer = to_edge(torch.export.export(RNN(), args)).to_executorch().buffer
    want = [t.numpy() for t in RNN()(*args)]
    for got in run_executorch_calls(buffer, [[a.numpy() for a in args]] * 2):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
