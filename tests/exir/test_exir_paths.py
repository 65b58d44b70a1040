"""ExecuTorch's ``exir`` module paths behave as there: errors, symbolic sizes, memory ops, dialects, lowered modules."""

from __future__ import annotations

import operator

import pytest
import torch

from edgetorch.errors import EdgetorchError, UnsupportedOperatorError


def test_export_error_carries_its_type_in_the_message():
    from edgetorch.exir.error import ExportError, ExportErrorType, InternalError, internal_assert

    error = ExportError(ExportErrorType.NOT_SUPPORTED, "sets are not supported")
    assert str(error) == "[ExportErrorType.NOT_SUPPORTED]: sets are not supported"
    assert error.error_code is ExportErrorType.NOT_SUPPORTED and isinstance(error, EdgetorchError)
    assert [t.value for t in ExportErrorType] == [1, 2, 3, 4, 5, 6]
    internal_assert(True, "fine")
    with pytest.raises(InternalError, match="broken"):
        internal_assert(False, "broken")


def _dynamic_size() -> torch.SymInt:
    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1

    ep = torch.export.export(M(), (torch.ones(5),), dynamic_shapes=({0: torch.export.Dim("n", min=2, max=40)},))
    return next(n for n in ep.graph.nodes if n.op == "placeholder").meta["val"].shape[0]


def test_sym_util_evaluates_hints_bounds_and_symbols():
    from edgetorch.exir.sym_util import (
        collect_free_symbols,
        eval_expr,
        eval_shape,
        eval_shape_upper_bound,
        eval_upper_bound,
    )

    n = _dynamic_size()
    assert (eval_expr(n), eval_upper_bound(n)) == (5, 40)
    assert eval_shape([n * 2, 3]) == [10, 3]
    assert eval_shape_upper_bound([n * 2, 3]) == [80, 3]
    assert {str(s) for s in collect_free_symbols([n, 4, n + 1])} == {str(n.node.expr)}
    assert eval_expr(7) == eval_upper_bound(7) == 7


def test_dynamic_memory_planning_mode_values():
    from edgetorch.exir.dynamic_shape import DynamicMemoryPlanningMode

    assert (DynamicMemoryPlanningMode.UPPER_BOUND, DynamicMemoryPlanningMode.SYMBOLIC) == (0, 1)


def test_memory_free_is_a_no_op_and_alloc_takes_symbolic_sizes_at_their_hint():
    from edgetorch.exir import memory

    assert memory.free(object()) is None
    assert memory.alloc(((_dynamic_size(), 2), torch.float32)).shape == (5, 2)


def test_bind_pattern_to_op_makes_a_backend_op_that_decomposes_when_retraced():
    from edgetorch.exir.dialects._ops import bind_pattern_to_op, ops
    from edgetorch.exir.dialects.backend._ops import BackendOpOverload
    from edgetorch.exir.dialects.edge._ops import EdgeOpOverload

    library = torch.library.Library("edgetorch_paths_test", "DEF")

    @bind_pattern_to_op(library, "add_relu(Tensor self, Tensor other) -> Tensor")
    def add_relu(x, y):
        return torch.ops.aten.relu.default(torch.ops.aten.add.Tensor(x, y))

    op = ops.backend.edgetorch_paths_test.add_relu.default
    assert isinstance(op, BackendOpOverload) and isinstance(op, EdgeOpOverload)
    assert op._equivalent_callable is add_relu
    x, y = torch.tensor([-2.0, 1.0]), torch.tensor([0.5, 0.5])
    assert torch.equal(op(x, y), torch.tensor([0.0, 1.5]))

    class M(torch.nn.Module):
        def forward(self, a, b):
            return torch.ops.edgetorch_paths_test.add_relu(a, b)

    ep = torch.export.export(M(), (x, y)).run_decompositions()
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.aten.add.Tensor, torch.ops.aten.relu.default]
    with pytest.raises(UnsupportedOperatorError, match="bind_pattern_to_op"):  # a RuntimeError, as ExecuTorch's
        ops.backend.not_a_backend_namespace  # noqa: B018


def test_edge_ops_report_the_edge_ops_module():
    from edgetorch.exir.dialects._ops import ops
    from edgetorch.exir.dialects.edge import _ops as edge_ops

    op = ops.edge.aten.add.Tensor
    assert isinstance(op, edge_ops.EdgeOpOverload)
    assert op.__module__ == edge_ops.__name__


def _traced() -> torch.fx.GraphModule:
    class M(torch.nn.Module):
        def forward(self, x, y):
            return (x + y) * x - 1

    return torch.fx.symbolic_trace(M())


def test_create_submodule_from_nodes_cuts_the_nodes_out_and_keeps_the_result():
    from edgetorch.exir.lowered_backend_module import create_submodule_from_nodes

    gm = _traced()
    x, y = torch.randn(3), torch.randn(3)
    expected = gm(x, y)
    add, mul = [n for n in gm.graph.nodes if n.op == "call_function"][:2]
    sub_gm, call = create_submodule_from_nodes(gm, [mul, add], "part")
    assert call.op == "call_module" and call.target == "fused_part" and gm.fused_part is sub_gm
    assert [u.target for u in call.users] == [operator.getitem]
    assert [n.target for n in sub_gm.graph.nodes if n.op == "call_function"] == [operator.add, operator.mul]
    assert torch.equal(gm(x, y), expected)


def test_create_submodule_from_nodes_refuses_a_group_with_a_hole():
    from edgetorch.exir.lowered_backend_module import create_submodule_from_nodes

    gm = _traced()
    add, _, sub = [n for n in gm.graph.nodes if n.op == "call_function"]
    with pytest.raises(Exception, match="cycle|self-contained"):
        create_submodule_from_nodes(gm, [add, sub], "holed")


def test_memory_free_in_a_planned_graph_is_emitted_as_a_free_call():
    from edgetorch.exir import memory, to_edge
    from edgetorch.exir.emit import emit_program
    from edgetorch.format.program import FreeCall
    from edgetorch.format.pte import save_pte
    from edgetorch.runtime import Runtime

    class Twice(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x + 1) * 2

    x = torch.randn(4)
    planned = to_edge(torch.export.export(Twice(), (x,))).to_executorch().exported_program()
    graph = planned.graph
    first = next(n for n in graph.nodes if n.op == "call_function" and "add" in str(n.target))
    relu = next(n for n in graph.nodes if n.op == "call_function" and "relu" in str(n.target))
    with graph.inserting_after(relu):
        graph.call_function(memory.free, (first.meta["spec"],))
    out = emit_program(planned)
    instructions = [i.instr_args for i in out.program.execution_plan[0].chains[0].instructions]
    operators = [op.name for op in out.program.execution_plan[0].operators]
    named = [(operators[i.op_index] if not isinstance(i, FreeCall) else "free", i) for i in instructions]
    (at,) = [k for k, (name, _) in enumerate(named) if name == "free"]
    assert named[at - 1][0] == "aten::relu"  # placed where the graph put it
    add = next(i for name, i in named if name == "aten::add")
    assert named[at][1].value_index == add.args[-1]  # the add's result is the tensor freed
    method = Runtime.get().load_program(save_pte(out.pte_program, out.segments)).load_method("forward")
    torch.testing.assert_close(torch.from_numpy(method.execute([x.numpy()])[0]), Twice()(x))
