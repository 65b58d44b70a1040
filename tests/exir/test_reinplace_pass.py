"""reinplace_pass: which functional ops become in-place, which stay, and the results are unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import ExecutorchBackendConfig, to_edge
from edgetorch.exir.dialects._ops import ops
from edgetorch.exir.passes.reinplace import DEFAULT_INPLACEABLE_OPS, mutated_arg_positions, reinplace_pass
from edgetorch.runtime import Runtime


def _targets(ep) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


class _Adds(torch.nn.Module):
    def forward(self, x, y, z):
        t = x + y  # x is a read-only input: stays functional
        return t + z  # t is dead afterwards: written in place


class _Buffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(5))

    def forward(self, i, v):
        self.state.index_put_((i,), v)
        return self.state + 1


def _edge(module, args):
    return to_edge(torch.export.export(module, args, strict=True))


def test_add_reinplaced_only_where_the_written_input_is_dead():
    ep = reinplace_pass(
        _edge(_Adds(), (torch.zeros(3), torch.ones(3), torch.ones(3))).exported_program(),
        ops_to_inplace={ops.edge.aten.add.Tensor},
    )
    targets = _targets(ep)
    assert targets.count("aten.add_.Tensor") == 1 and targets.count("aten.add.Tensor") == 1
    # The user output now names the in-place node.
    assert ep.graph_signature.output_specs[0].arg.name == ep.graph.output_node().args[0][0].name


def test_default_set_and_empty_set():
    assert ops.edge.aten.index_put.default in DEFAULT_INPLACEABLE_OPS
    args = (torch.zeros(3), torch.ones(3), torch.ones(3))
    assert "aten.add_.Tensor" not in _targets(reinplace_pass(_edge(_Adds(), args).exported_program()))
    ep = _edge(_Buffer(), (torch.tensor([1]), torch.tensor([2.0]))).exported_program()
    assert "aten.index_put.default" in _targets(reinplace_pass(ep, ops_to_inplace=()))


def test_broadcasting_or_dtype_changing_op_is_not_reinplaced():
    class M(torch.nn.Module):
        def forward(self, a, b):
            t = a * 2
            return t + b, (t * 3) < b

    ep = _edge(M(), (torch.ones(4), torch.ones(2, 4))).exported_program()
    ep = reinplace_pass(ep, ops_to_inplace={ops.edge.aten.add.Tensor, ops.edge.aten.lt.Tensor})
    assert not [t for t in _targets(ep) if t.endswith("_.Tensor")]


def test_mismatched_override_is_rejected():
    ep = _edge(_Adds(), (torch.zeros(3), torch.ones(3), torch.ones(3))).exported_program()
    with pytest.raises(ValueError, match="sub_"):
        reinplace_pass(ep, inplace_overrides={ops.edge.aten.add.Tensor: ops.edge.aten.sub_.Tensor})
    with pytest.raises(ValueError, match="Tensor\\(a!\\)"):
        reinplace_pass(ep, inplace_overrides={ops.edge.aten.add.Tensor: ops.edge.aten.mul.Tensor})


def test_mutated_arg_positions():
    assert mutated_arg_positions(torch.ops.aten.index_put_.default) == (0,)
    assert mutated_arg_positions(torch.ops.aten.add.Tensor) == ()


def test_buffer_updated_in_place_runs_like_eager():
    args = (torch.tensor([1]), torch.tensor([2.0]))
    pte = _edge(_Buffer(), args).to_executorch(ExecutorchBackendConfig(run_reinplace_pass=True)).buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    ex = method._executor
    described = [ex.describe(pc) for pc in range(len(ex.instructions))]
    assert "aten::index_put_" in described and "aten::copy_" not in described
    eager = _Buffer()
    for _ in range(2):  # the buffer keeps its update across calls
        expected = eager(*args).numpy()
        np.testing.assert_allclose(method.execute([a.numpy() for a in args])[0], expected)


class _Cat(torch.nn.Module):
    def forward(self, x, y):
        empty = torch.empty((0, 3))
        return torch.cat([empty, x, empty, y])


def test_empty_cat_inputs_pruned_in_to_edge():
    from edgetorch.exir.passes.prune_empty_tensors_pass import PruneEmptyTensorsPass

    args = (torch.ones(2, 3), torch.full((1, 3), 2.0))
    ep = _edge(_Cat(), args).exported_program()
    (cat,) = [n for n in ep.graph.nodes if "cat" in str(n.target)]
    assert len(cat.args[0]) == 2
    torch.testing.assert_close(ep.module()(*args), _Cat()(*args))
    # All inputs empty: the cat becomes full(shape, 0).
    gm = torch.export.export(_Cat(), (torch.ones(0, 3), torch.ones(0, 3)), strict=True).graph_module
    assert PruneEmptyTensorsPass()(gm).modified
    assert [str(n.target) for n in gm.graph.nodes if n.op == "call_function"] == ["aten.full.default"]
