"""The graph passes at ExecuTorch's module paths (exir/passes/*): each does its namesake's rewrite on a small
exported or edge program, and leaves alone what it must not touch."""

import logging

import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.exir.dialects._ops import ops as exir_ops


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_convert_constant_dim_order_pass_makes_strided_constants_contiguous():
    from edgetorch.exir.passes.convert_constant_dim_order_pass import convert_constant_dim_order_pass

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("t", torch.arange(12.0).reshape(3, 4).t())  # strided: neither layout
            self.register_buffer("c", torch.zeros(1, 2, 3, 3).to(memory_format=torch.channels_last))

        def forward(self, x):
            return x + self.t, self.c

    ep = torch.export.export(M(), (torch.ones(4, 3),))
    assert not ep.state_dict["t"].is_contiguous()
    out = convert_constant_dim_order_pass(ep)
    assert out is ep and ep.state_dict["t"].is_contiguous()
    assert torch.equal(ep.state_dict["t"], torch.arange(12.0).reshape(3, 4).t())
    assert ep.state_dict["c"].is_contiguous(memory_format=torch.channels_last)  # kept as it was
    [b_t] = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name == "b_t"]
    assert b_t.meta["val"].is_contiguous()


def test_remove_noop_pass_drops_a_cast_to_the_same_dtype_and_a_full_slice():
    from edgetorch.exir.passes import RemoveNoopPass

    t = torch.ones(4, 3)
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    cast = graph.call_function(torch.ops.aten.to.dtype, (x, torch.float32))
    full = graph.call_function(torch.ops.aten.slice_copy.Tensor, (cast, 0, 0, 4))
    part = graph.call_function(torch.ops.aten.slice_copy.Tensor, (full, 0, 0, 2))
    graph.output(part)
    x.meta["val"] = cast.meta["val"] = t  # to() of the same dtype hands back its input
    full.meta["val"], part.meta["val"] = torch.ones(4, 3), torch.ones(2, 3)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    RemoveNoopPass().call(gm)
    assert _targets(gm) == [torch.ops.aten.slice_copy.Tensor] and part.args[0] is x


def test_fold_redundant_dequantize_quantize_pairs_with_equal_parameters_only():
    from edgetorch.exir.passes.fold_redundant_qdq_pass import FoldRedundantDequantizeQuantizePass

    qd = torch.ops.quantized_decomposed
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    dq = graph.call_function(qd.dequantize_per_tensor.default, (x, 0.5, 0, -128, 127, torch.int8))
    same = graph.call_function(qd.quantize_per_tensor.default, (dq, 0.5, 0, -128, 127, torch.int8))
    other = graph.call_function(qd.quantize_per_tensor.default, (dq, 0.25, 0, -128, 127, torch.int8))
    graph.output((same, other))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    result = FoldRedundantDequantizeQuantizePass()(gm)
    assert result.modified
    outputs = list(gm.graph.output_node().args[0])
    assert outputs[0] is x and outputs[1].target == qd.quantize_per_tensor.default


def test_graph_asserts_removed_and_sym_size_packets_made_overloads():
    from edgetorch.exir.passes.remove_graph_asserts_pass import RemoveGraphAssertsPass
    from edgetorch.exir.passes.replace_sym_size_op_pass import ReplaceSymSizeOpPass

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    size = graph.call_function(torch.ops.aten.sym_size, (x, 0))
    graph.call_function(torch.ops.aten._assert_scalar.default, (True, "never fails"))
    graph.output(size)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    ReplaceSymSizeOpPass()(gm)
    RemoveGraphAssertsPass()(gm)
    assert _targets(gm) == [torch.ops.aten.sym_size.int]


def test_view_copy_chains_read_their_base():
    from edgetorch.exir.passes.normalize_view_copy_base_pass import NormalizeViewCopyBasePass

    view = torch.ops.aten.view_copy.default
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a = graph.call_function(view, (x, [6]))
    b = graph.call_function(view, (a, [2, 3]))
    graph.output(b)
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert NormalizeViewCopyBasePass()(gm).modified
    assert b.args[0] is x
    NormalizeViewCopyBasePass().ensures(gm)


def test_cse_merges_equal_pure_calls_and_keeps_random_ones():
    from edgetorch.exir.passes.cse_pass import CSEPass

    add, rand = torch.ops.aten.add.Tensor, torch.ops.aten.rand.default
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    a1 = graph.call_function(add, (x, x))
    a2 = graph.call_function(add, (x, x))
    r1 = graph.call_function(rand, ([2],))
    r2 = graph.call_function(rand, ([2],))
    m1 = graph.call_function(torch.ops.aten.mul.Tensor, (a1, r1))
    m2 = graph.call_function(torch.ops.aten.mul.Tensor, (a2, r2))
    graph.output((m1, m2))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    assert CSEPass()(gm).modified
    assert _targets(gm).count(add) == 1 and _targets(gm).count(rand) == 2  # rand differs call to call


def test_mixed_type_arithmetic_gets_a_cast():
    from edgetorch.exir.passes import RemoveMixedTypeOperators

    class M(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    ep = torch.export.export(M(), (torch.ones(3, dtype=torch.int64), torch.ones(3)))
    gm = RemoveMixedTypeOperators()(ep.graph_module).graph_module
    casts = [n for n in gm.graph.nodes if n.target == torch.ops.aten._to_copy.default]
    assert len(casts) == 1 and casts[0].kwargs["dtype"] == torch.float32


def test_memory_format_ops_and_back():
    from edgetorch.exir.passes.memory_format_ops_pass import DimOrderOpsRevertPass, MemoryFormatOpsPass

    class M(torch.nn.Module):
        def forward(self, x):
            return x.to(memory_format=torch.channels_last) * 2

    edge = to_edge(torch.export.export(M(), (torch.randn(1, 2, 3, 3),)))
    gm = edge.exported_program().graph_module
    dim = exir_ops.edge.dim_order_ops._to_dim_order_copy.default
    assert dim in _targets(gm)
    reverted = DimOrderOpsRevertPass()(gm).graph_module
    copies = [n for n in reverted.graph.nodes if n.target == exir_ops.edge.aten._to_copy.default]
    assert dim not in _targets(reverted) and copies
    assert torch.channels_last in [n.kwargs.get("memory_format") for n in copies]
    again = MemoryFormatOpsPass()(reverted).graph_module
    orders = [list(n.kwargs["dim_order"]) for n in again.graph.nodes if n.target == dim]
    assert [0, 2, 3, 1] in orders and exir_ops.edge.aten._to_copy.default not in _targets(again)


def test_lift_constant_tensor_pass_makes_get_attr_constants_buffers():
    from edgetorch.exir.program._program import lift_constant_tensor_pass

    class M(torch.nn.Module):
        def forward(self, x):
            return x + 1

    ep = torch.export.export(M(), (torch.ones(2),))
    gm = ep.graph_module
    gm.register_buffer("_c", torch.full((2,), 3.0))
    add = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_before(add):
        const = gm.graph.get_attr("_c")
    add.args = (add.args[0], const)
    gm.recompile()
    lift_constant_tensor_pass(ep)
    assert not any(n.op == "get_attr" for n in gm.graph.nodes)
    lifted = [s for s in ep.graph_signature.input_specs if s.target == "_lifted_tensor_constant0"]
    assert len(lifted) == 1 and lifted[0].persistent
    assert torch.equal(ep.state_dict["_lifted_tensor_constant0"], torch.full((2,), 3.0))


def test_ops_a_partitioner_may_not_preserve():
    from edgetorch.exir.program import _program

    aten = torch.ops.aten
    asked = [aten.linear.default, aten.add.Tensor, aten.split.Tensor, aten.add_.Tensor]
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger(_program.__name__)
    logger.addHandler(handler)
    _program._WARNED.clear()
    try:
        kept = _program._remove_invalid_ops_for_not_decompose(asked)
    finally:
        logger.removeHandler(handler)
    assert kept == [aten.linear.default]
    text = " ".join(records)
    assert "blocklist" in text and "aliases output" in text and "mutable" in text


@pytest.mark.parametrize("mode", [None])
def test_propagate_dynamic_shape_gives_the_spec_passes(mode):
    from edgetorch.exir.passes import HintBasedSymShapeEvalPass, SpecPropPass, propagate_dynamic_shape

    passes = propagate_dynamic_shape(mode)
    assert [type(p) for p in passes] == [SpecPropPass, HintBasedSymShapeEvalPass]


def test_to_edge_folds_a_dequantize_quantize_identity():
    class DqQ(torch.nn.Module):
        def forward(self, x):
            qd = torch.ops.quantized_decomposed
            return qd.quantize_per_tensor.default(
                qd.dequantize_per_tensor.default(x, 0.5, 3, -128, 127, torch.int8), 0.5, 3, -128, 127, torch.int8
            )

    x = torch.randint(-128, 128, (4, 5), dtype=torch.int8)
    edge = to_edge(torch.export.export(DqQ(), (x,)))
    assert not any("quantize" in str(t) for t in _targets(edge.exported_program().graph_module))
    assert torch.equal(edge.exported_program().module()(x), x)


def test_tracer_decomposition_table_is_to_edges_and_a_fresh_copy():
    from edgetorch.exir.passes.decompose import core_aten_decompositions
    from edgetorch.exir.tracer import _default_decomposition_table

    table = _default_decomposition_table()
    assert table.keys() == core_aten_decompositions().keys()
    table.pop(torch.ops.aten.linear.default, None)
    assert torch.ops.aten.linear.default in _default_decomposition_table()
    ep = torch.export.export(torch.nn.Linear(3, 2), (torch.ones(1, 3),))
    kept = ep.run_decompositions(decomp_table=table)
    assert torch.ops.aten.linear.default in _targets(kept.graph_module)
    old = _default_decomposition_table(_use_old_decomp_table=True)
    assert torch.ops.aten.transpose.int in old and torch.ops.aten.linear.default not in old


def test_spec_prop_gives_the_output_node_its_values_specs():
    from edgetorch.exir.passes import SpecPropPass

    class M(torch.nn.Module):
        def forward(self, x):
            return x + x, x * 2

    gm = to_edge(torch.export.export(M(), (torch.ones(3, 2),))).exported_program().graph_module
    SpecPropPass()(gm)
    out = gm.graph.output_node()
    assert [s is a.meta["spec"] for s, a in zip(out.meta["spec"], out.args[0])] == [True, True]


def test_a_pass_may_set_a_specs_shape_dynamism():
    from edgetorch.exir.schema import TensorShapeDynamism
    from edgetorch.exir.tensor import TensorSpec

    spec = TensorSpec.from_tensor(torch.empty(2))
    assert spec.shape_dynamism == TensorShapeDynamism.STATIC and not spec.is_upper_bound_tensor
    spec.shape_dynamism = TensorShapeDynamism.DYNAMIC_BOUND
    assert spec.shape_dynamism == TensorShapeDynamism.DYNAMIC_BOUND and spec.is_upper_bound_tensor
