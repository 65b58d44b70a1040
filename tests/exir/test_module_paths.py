"""The module paths ExecuTorch's own code imports most, and the ExecutorchBackendConfig fields, behave as there."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import Dim, export
from torch.export.experimental import _export_forward_backward

from edgetorch.exir import ExecutorchBackendConfig, to_edge
from edgetorch.exir.dynamic_shape import DynamicMemoryPlanningMode
from edgetorch.runtime import Runtime


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))
        self.register_buffer("b", torch.randn(3))

    def forward(self, x):
        return x @ (self.w.t() * 2 + self.b) + torch.full((3,), 2.0)


def _run(buffer: bytes, args, method: str = "forward", data_files=()) -> list[np.ndarray]:
    loaded = Runtime.get().load_program(buffer, data_files=list(data_files)).load_method(method)
    return loaded.execute([a.numpy() for a in args])


def test_program_capture_schema_and_scalar_type_paths_hold_the_same_objects():
    import edgetorch.exir as exir
    from edgetorch.exir import schema
    from edgetorch.exir.capture._config import EdgeCompileConfig
    from edgetorch.exir.capture._config import ExecutorchBackendConfig as Config
    from edgetorch.exir.program import ExecutorchProgramManager
    from edgetorch.exir.program._program import EdgeProgramManager, to_edge_transform_and_lower
    from edgetorch.exir.scalar_type import ScalarType

    assert (EdgeProgramManager, to_edge_transform_and_lower, Config) == (
        exir.EdgeProgramManager,
        exir.to_edge_transform_and_lower,
        exir.ExecutorchBackendConfig,
    )
    manager = to_edge(export(Affine(), (torch.randn(2, 3),)), compile_config=EdgeCompileConfig())
    et = manager.to_executorch()
    assert isinstance(et, ExecutorchProgramManager) and isinstance(et.executorch_program, schema.Program)
    plan = et.executorch_program.execution_plan[0]
    assert isinstance(plan, schema.ExecutionPlan)
    tensors = [v.val for v in plan.values if isinstance(v.val, schema.Tensor)]
    assert ScalarType.FLOAT in {t.scalar_type for t in tensors}


def test_constant_prop_pass_computes_weight_expressions_ahead_of_time():
    from edgetorch.exir.passes.constant_prop_pass import constant_prop_pass

    model, x = Affine(), torch.randn(2, 3)
    edge = to_edge(export(model, (x,))).exported_program()
    folded = constant_prop_pass(edge)
    ops = [str(n.target) for n in folded.graph.nodes if n.op == "call_function"]
    assert ops == ["aten.mm.default", "aten.full.default", "aten.add.Tensor"]  # full is left to run
    assert list(folded.constants) == ["_prop_tensor_constant0"] and "w" not in folded.state_dict
    torch.testing.assert_close(folded.module()(x), model(x))
    assert len([n for n in edge.graph.nodes if n.op == "call_function"]) == 7, "the input program is left as is"
    skipped = constant_prop_pass(edge, custom_skip_targets={torch.ops.aten.permute_copy.default})
    assert "w" in skipped.state_dict  # the permute (and so all that follows it) stays in the program

    plain = to_edge(export(model, (x,))).to_executorch()
    fused = to_edge(export(model, (x,))).to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True))
    count = lambda m: len(m.executorch_program.execution_plan[0].chains[0].instructions)  # noqa: E731
    assert count(fused) < count(plain)
    np.testing.assert_allclose(_run(fused.buffer, (x,))[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        return self.loss(self.l2(torch.relu(self.l1(x))), y)


def _joint():
    torch.manual_seed(0)
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 1, 0])
    return _export_forward_backward(export(MLP(), (x, y), strict=True)), (x, y)


def test_external_mutable_weights_moves_trainable_weights_to_a_ptd():
    from edgetorch.exir.passes import weights_to_outputs_pass
    from edgetorch.extension.training import _load_for_executorch_for_training

    joint, (x, y) = _joint()
    assert weights_to_outputs_pass is not None and callable(weights_to_outputs_pass)
    inside = to_edge(joint).to_executorch()
    outside = to_edge(_joint()[0]).to_executorch(ExecutorchBackendConfig(external_mutable_weights=True))
    assert list(outside.data_files) == ["_default_external_constant"]
    assert len(outside.buffer) < len(inside.buffer)
    want = _load_for_executorch_for_training(inside.buffer).forward_backward("forward", (x, y))
    module = _load_for_executorch_for_training(outside.buffer, outside.data_files["_default_external_constant"])
    got = module.forward_backward("forward", (x, y))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert sorted(module.named_parameters()) == ["l1.bias", "l1.weight", "l2.bias", "l2.weight"]
    with pytest.raises(ValueError, match="training program"):
        to_edge(_joint()[0]).to_executorch(ExecutorchBackendConfig(do_quant_fusion_and_const_prop=True))


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 1


def test_emit_mutable_buffer_names_writes_the_buffer_name():
    from edgetorch.exir.passes import MemoryPlanningPass

    x = torch.ones(3)
    named = to_edge(export(Counter(), (x,))).to_executorch(ExecutorchBackendConfig(emit_mutable_buffer_names=True))
    infos = [
        v.val.extra_tensor_info
        for v in named.executorch_program.execution_plan[0].values
        if hasattr(v.val, "extra_tensor_info")
    ]
    assert [i.fully_qualified_name for i in infos if i is not None] == ["total"]
    method = Runtime.get().load_program(named.buffer).load_method("forward")
    method.execute([x.numpy()])
    np.testing.assert_array_equal(method.execute([x.numpy()])[0], [2.0, 2.0, 2.0])  # state kept between calls
    plain = to_edge(export(Counter(), (x,))).to_executorch()
    assert all(
        getattr(v.val, "extra_tensor_info", None) is None for v in plain.executorch_program.execution_plan[0].values
    )
    unplanned = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_mutable_buffers=False))
    with pytest.raises(ValueError, match="emit_mutable_buffer_names=True"):
        to_edge(export(Counter(), (x,))).to_executorch(unplanned)


def test_dynamic_memory_planning_mode_picks_where_dynamic_sizes_are_planned():
    class Double(torch.nn.Module):
        def forward(self, x):
            return x * 2

    def planned(mode):
        ep = export(Double(), (torch.ones(4, 2),), dynamic_shapes=({0: Dim("n", max=100)},))
        config = ExecutorchBackendConfig(dynamic_memory_planning_mode=mode)
        return to_edge(ep).to_executorch(config)

    upper, symbolic = planned(DynamicMemoryPlanningMode.UPPER_BOUND), planned(DynamicMemoryPlanningMode.SYMBOLIC)
    assert upper.memory_plans["forward"].bufsizes[1] >= 2 * 100 * 2 * 4  # input and output at n = 100
    assert 2 * 4 * 2 * 4 <= symbolic.memory_plans["forward"].bufsizes[1] < 2 * 10 * 2 * 4  # at n = 4
    np.testing.assert_array_equal(_run(upper.buffer, (torch.ones(50, 2),))[0], np.full((50, 2), 2.0))
    np.testing.assert_array_equal(_run(symbolic.buffer, (torch.ones(3, 2),))[0], np.full((3, 2), 2.0))
    assert planned(1).memory_plans["forward"].bufsizes == symbolic.memory_plans["forward"].bufsizes


def test_emit_program_emits_planned_methods_and_constant_methods():
    from edgetorch.exir.emit import emit_program
    from edgetorch.format.pte import save_pte

    model, x = Affine(), torch.randn(2, 3)
    manager = to_edge(export(model, (x,))).to_executorch()
    out = emit_program({"forward": manager.exported_program()}, prim_getters={"answer": 42})
    assert [p.name for p in out.program.execution_plan] == ["forward", "answer"]
    assert out.debug_handle_map["forward"]
    buffer = save_pte(out.pte_program, out.segments)
    np.testing.assert_allclose(_run(buffer, (x,))[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert _run(buffer, (), "answer") == [42]


def test_serialize_moves_inline_data_to_segments_and_back():
    from edgetorch.exir._serialize import _deserialize_pte_binary, _serialize_pte_binary

    model, x = Affine(), torch.randn(2, 3)
    buffer = to_edge(export(model, (x,))).to_executorch().buffer
    pte_file = _deserialize_pte_binary(buffer)
    program = pte_file.program
    assert program.constant_buffer and program.segments == []
    again = _serialize_pte_binary(pte_file)
    np.testing.assert_allclose(_run(again, (x,))[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)
    assert _deserialize_pte_binary(again).program.constant_buffer[1:] == program.constant_buffer[1:]


def test_graph_module_helpers_find_control_flow_subgraphs():
    from edgetorch.exir.graph_module import (
        bfs_trace_with_node_process,
        contains_any_call_fn_target_op,
        get_cond_while_submodules,
        get_control_flow_submodules,
    )

    class Branchy(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))

    gm = export(Branchy(), (torch.ones(3),)).graph_module
    found = get_control_flow_submodules(gm)
    assert [name for name, _, _ in found] == ["true_graph_0", "false_graph_0"]
    assert found == get_cond_while_submodules(gm)
    assert contains_any_call_fn_target_op(gm, [torch.ops.aten.cos.default])
    assert not contains_any_call_fn_target_op(gm, [torch.ops.aten.tan.default])
    seen = []
    bfs_trace_with_node_process(gm, lambda n: seen.append(n.target))
    assert torch.ops.aten.sin.default in seen and torch.ops.aten.cos.default in seen


def test_debug_handles_and_their_ancestor_identifiers():
    from edgetorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY, get_greatest_ancestor_node_identifier

    class Lin(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.l(x)

    ep = to_edge(export(Lin(), (torch.randn(2, 3),))).exported_program()
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert len(ops) > 1  # linear becomes permute + addmm, sharing the user's one node
    assert len({get_greatest_ancestor_node_identifier(n) for n in ops}) == 1
    assert len({n.meta[DEBUG_HANDLE_KEY] for n in ops}) == 1
    placeholder = torch.fx.Graph().placeholder("lonely")
    with pytest.raises(KeyError, match="lonely"):
        get_greatest_ancestor_node_identifier(placeholder)


def test_passes_package_exposes_executorchs_functions():
    from edgetorch.exir.passes import dead_code_elimination_pass, remove_unused_parameters_pass
    from edgetorch.exir.passes.spec_prop_pass import SpecPropPass, make_spec

    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))

        def forward(self, x):
            dead = x * 3  # noqa: F841
            return x + self.used

    ep = export(Unused(), (torch.ones(2),))
    trimmed = remove_unused_parameters_pass(ep)
    assert list(trimmed.state_dict) == ["used"]
    gm = torch.fx.symbolic_trace(Unused())
    assert dead_code_elimination_pass(gm).modified
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [__import__("operator").add]
    assert callable(SpecPropPass()) and make_spec(torch.ones(2)).shape is None


def test_debug_handle_passes_number_afresh_or_only_what_is_missing():
    from edgetorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY
    from edgetorch.exir.passes.debug_handle_generator_pass import (
        DebugHandleGeneratorPass,
        generate_missing_debug_handles,
    )

    ep = to_edge(export(Affine(), (torch.randn(2, 3),))).exported_program()
    ops = [n for n in ep.graph.nodes if n.op == "call_function"]
    before = [n.meta[DEBUG_HANDLE_KEY] for n in ops]
    for node in ops:
        node.meta[DEBUG_HANDLE_KEY] = 100
    ops[0].meta.pop(DEBUG_HANDLE_KEY)
    generate_missing_debug_handles(ep)
    assert ops[0].meta[DEBUG_HANDLE_KEY] == 101 and ops[1].meta[DEBUG_HANDLE_KEY] == 100
    DebugHandleGeneratorPass()(ep.graph_module)
    assert [n.meta[DEBUG_HANDLE_KEY] for n in ops] == before


def test_op_replace_pass_and_write_back_pass():
    from edgetorch.exir.dialects._ops import EdgeOpOverload
    from edgetorch.exir.passes.insert_write_back_for_buffers_pass import insert_write_back_for_buffers_pass
    from edgetorch.exir.passes.replace_aten_with_edge_pass import OpReplacePass, aten_to_edge

    gm = export(Affine(), (torch.randn(2, 3),)).graph_module
    assert OpReplacePass()(gm).modified
    assert all(isinstance(n.target, EdgeOpOverload) for n in gm.graph.nodes if n.op == "call_function")
    assert aten_to_edge(torch.ops.aten.add.Tensor) is aten_to_edge(torch.ops.aten.add.Tensor)

    ep = export(Counter(), (torch.ones(3),)).run_decompositions({})  # the update is a functional add
    gm, signature = insert_write_back_for_buffers_pass(ep)
    copies = [n for n in gm.graph.nodes if n.target is torch.ops.aten.copy_.default]
    assert len(copies) == 1 and signature is ep.graph_signature


def test_serialize_for_executorch_writes_the_program_and_its_data_files():
    from edgetorch.exir import ExecutorchBackendConfig
    from edgetorch.exir._serialize._serialize import serialize_for_executorch
    from edgetorch.exir.emit import emit_program
    from edgetorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    model, x = Affine(), torch.randn(2, 3)
    config = ExecutorchBackendConfig(external_constants=True)
    manager = to_edge(export(model, (x,))).to_executorch(config)
    out = emit_program({"forward": manager.exported_program()})
    assert list(out.external_constant_map) == ["_default_external_constant"] and len(out.external_constant_buffer) == 2
    pte, ptd = serialize_for_executorch(out, config, FlatTensorSerializer(), out.named_data)
    assert list(ptd) == ["_default_external_constant"]
    method = Runtime.get().load_program(bytes(pte), data_files=[bytes(ptd["_default_external_constant"])])
    got = method.load_method("forward").execute([x.numpy()])
    np.testing.assert_allclose(got[0], model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_buffer_is_what_serializing_the_executorch_program_writes():
    """As in ExecuTorch: ``executorch_program`` holds its data inline, and serializing it with the default
    options gives the manager's own bytes (no extended header without segment data, no padding after the
    last constant)."""
    from edgetorch.exir._serialize import _PTEFile, _serialize_pte_binary

    class AddOnly(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    for model, args in [(Affine(), (torch.randn(2, 3),)), (AddOnly(), (torch.ones(2, 2), torch.ones(2, 2)))]:
        manager = to_edge(export(model, args)).to_executorch()
        assert bytes(_serialize_pte_binary(_PTEFile(program=manager.executorch_program))) == manager.buffer


@pytest.mark.parametrize("skip_dim_order", [True, False])
def test_constant_prop_returns_a_constant_output_through_a_copy(skip_dim_order):
    from edgetorch.exir import EdgeCompileConfig
    from edgetorch.exir.passes.constant_prop_pass import constant_prop_pass

    class Eight(torch.nn.Module):
        def forward(self):
            return torch.add(torch.tensor(3), torch.tensor(5))

    config = EdgeCompileConfig(_skip_dim_order=skip_dim_order)
    edge = to_edge(export(Eight(), (), strict=True), compile_config=config)
    edge._edge_programs["forward"] = constant_prop_pass(edge.exported_program(), _skip_dim_order=skip_dim_order)
    code = edge.exported_program().graph_module.code
    assert "c_lifted_tensor_" not in code and "_prop_tensor_constant" in code
    assert ("_clone_dim_order" in code) != skip_dim_order
    assert _run(edge.to_executorch().buffer, ()) == [8]
