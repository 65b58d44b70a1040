"""Emission details: the Program we write has the shape ExecuTorch's own emitter gives it."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from torch._higher_order_ops.executorch_call_delegate import executorch_call_delegate
from torch.export import Dim, export

from edgetorch.exir import EdgeCompileConfig, to_edge
from edgetorch.exir.passes.sym_shape_eval_pass import HintBasedSymShapeEvalPass
from edgetorch.exir.to_executorch import ExecutorchBackendConfig, ExecutorchProgramManager
from edgetorch.format.program import (
    DataLocation,
    DelegateCall,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    TensorList,
    TensorShapeDynamism,
)  # fmt: skip
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime
from tests.exir.test_to_executorch import MLP, Cond, Counter, assert_close, lower, run_et

et_exir = pytest.importorskip("executorch.exir")


def plan_of(buffer: bytes, index: int = 0):
    return load_pte(buffer).program.execution_plan[index]


@pytest.mark.parametrize(
    "cls,args", [(MLP, (torch.randn(2, 8),)), (Counter, (torch.ones(3),)), (Cond, (torch.randn(4),))]
)
def test_operators_instructions_and_io_match_executorch(cls, args):
    with torch.no_grad():
        ep = export(cls().eval(), args)
    ours = plan_of(to_edge(ep).to_executorch().buffer)
    theirs = plan_of(et_exir.to_edge(ep).to_executorch().buffer)
    assert [(o.name, o.overload) for o in ours.operators] == [(o.name, o.overload) for o in theirs.operators]
    kinds = [[type(i.instr_args).__name__ for i in p.chains[0].instructions] for p in (ours, theirs)]
    assert kinds[0] == kinds[1]
    assert len(ours.inputs) == len(theirs.inputs) and len(ours.outputs) == len(theirs.outputs)
    assert ours.container_meta_type == theirs.container_meta_type
    assert ours.non_const_buffer_sizes[0] == 0 and ours.non_const_buffer_sizes[1] > 0


def test_kernel_args_are_schema_args_then_outs_then_returns():
    plan = plan_of(lower(MLP(), (torch.randn(2, 8),)).buffer)
    names = [(o.name, o.overload) for o in plan.operators]
    addmm = next(
        i.instr_args for i in plan.chains[0].instructions if names[i.instr_args.op_index] == ("aten::addmm", "out")
    )
    schema = torch.ops.aten.addmm.out._schema
    assert len(addmm.args) == len(schema.arguments) + 1 and addmm.args[-1] == addmm.args[-2]
    for value in plan.values:
        if isinstance(value.val, IntList):
            assert all(isinstance(plan.values[i].val, Int) for i in value.val.items)


def test_multi_output_ops_return_a_tensor_list():
    class Max(torch.nn.Module):
        def forward(self, x):
            return x.max(0)

    x = torch.randn(4, 3)
    prog = lower(Max(), (x,))
    assert_close(run_et(prog.buffer, [x]), list(x.max(0)))
    plan = plan_of(prog.buffer)
    [call] = [i.instr_args for i in plan.chains[0].instructions]
    returned = plan.values[call.args[-1]].val
    assert isinstance(returned, TensorList) and returned.items == call.args[-3:-1]


def test_cond_becomes_jumps_and_moves():
    plan = plan_of(lower(Cond(), (torch.randn(4),)).buffer)
    instructions = [i.instr_args for i in plan.chains[0].instructions]
    kinds = [type(i) for i in instructions]
    assert kinds == [KernelCall, KernelCall, JumpFalseCall, KernelCall, MoveCall, JumpFalseCall, KernelCall, MoveCall]
    assert instructions[2].destination_instruction == 6 and instructions[5].destination_instruction == 8
    assert instructions[4].move_to == instructions[7].move_to == plan.outputs[0]


def test_hint_based_shape_eval_plans_example_sizes():
    with torch.no_grad():
        ep = export(MLP(), (torch.randn(3, 8),), dynamic_shapes={"x": {0: Dim("b", max=100)}}).run_decompositions()
    config = ExecutorchBackendConfig(sym_shape_eval_pass=HintBasedSymShapeEvalPass())
    plan = plan_of(ExecutorchProgramManager({"forward": ep}, config=config).buffer)
    x = plan.values[plan.inputs[0]].val
    assert x.sizes == [3, 8] and x.shape_dynamism == TensorShapeDynamism.DYNAMIC_BOUND


@dataclass
class Spec:
    key: str
    value: bytes


class Lowered(torch.nn.Module):
    """Stands in for a lowered backend module: what the emitter reads from a delegate's get_attr target."""

    def __init__(self, blob: bytes):
        super().__init__()
        self.backend_id, self.processed_bytes, self.compile_specs = "DemoBackend", blob, [Spec("level", b"\x02")]


def delegated_sin() -> torch.export.ExportedProgram:
    class SinPlusOne(torch.nn.Module):
        def forward(self, x):
            return x.sin() + 1

    ep = export(SinPlusOne(), (torch.randn(4),)).run_decompositions()
    gm, graph = ep.graph_module, ep.graph
    gm.lowered_module_0 = Lowered(b"blob-bytes" * 10)
    sin = next(n for n in graph.nodes if n.target == torch.ops.aten.sin.default)
    with graph.inserting_before(sin):
        module = graph.get_attr("lowered_module_0")
        call = graph.call_function(executorch_call_delegate, (module, sin.args[0]))
        item = graph.call_function(operator.getitem, (call, 0))
    call.meta["val"], item.meta["val"] = (sin.meta["val"],), sin.meta["val"]
    sin.replace_all_uses_with(item)
    graph.erase_node(sin)
    return ep


@pytest.mark.parametrize("extract", [True, False])
def test_delegate_call_and_blob_placement(extract):
    config = ExecutorchBackendConfig(extract_delegate_segments=extract)
    pte = load_pte(ExecutorchProgramManager({"forward": delegated_sin()}, config=config).buffer)
    plan = pte.program.execution_plan[0]
    [delegate] = plan.delegates
    assert delegate.id == "DemoBackend" and [(c.key, c.value) for c in delegate.compile_specs] == [("level", b"\x02")]
    call = plan.chains[0].instructions[0].instr_args
    assert isinstance(call, DelegateCall) and call.args[0] == plan.inputs[0] and len(call.args) == 2
    if extract:
        assert delegate.processed.location == DataLocation.SEGMENT
        assert bytes(pte.segment(delegate.processed.index)) == b"blob-bytes" * 10
    else:
        assert delegate.processed.location == DataLocation.INLINE
        assert bytes(pte.program.backend_delegate_data[delegate.processed.index].data) == b"blob-bytes" * 10


def test_constant_methods_return_their_values():
    values = {"get_max_seq_len": 128, "flags": [True, False], "scale": torch.tensor([1.5, 2.5])}
    ep = export(MLP(), (torch.randn(2, 8),)).run_decompositions()
    prog = ExecutorchProgramManager({"forward": ep}, values)
    plans = {p.name: p for p in load_pte(prog.buffer).program.execution_plan}
    assert plans["get_max_seq_len"].values[plans["get_max_seq_len"].outputs[0]].val == Int(128)
    assert len(plans["flags"].outputs) == 2
    torch.testing.assert_close(run_et(prog.buffer, [], "scale")[0], values["scale"])


def test_channels_last_constant_is_stored_in_its_dim_order():
    class Nhwc(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.arange(18.0).reshape(1, 2, 3, 3).to(memory_format=torch.channels_last))

        def forward(self, x):
            return self.w.clone() + x

    model = Nhwc()
    pte = load_pte(lower(model, (torch.tensor(1.0),)).buffer)
    plan = pte.program.execution_plan[0]
    [w] = [v.val for v in plan.values if getattr(v.val, "data_buffer_idx", 0) > 0]
    assert w.dim_order == [0, 2, 3, 1]
    offset = pte.program.constant_segment.offsets[w.data_buffer_idx]
    stored = torch.frombuffer(bytearray(pte.segment(0)[offset : offset + 18 * 4]), dtype=torch.float32)
    assert torch.equal(stored, model.w.permute(0, 2, 3, 1).reshape(-1))


def test_unbounded_dynamic_dimension_is_rejected():
    with torch.no_grad():
        ep = export(MLP(), (torch.randn(2, 8),), dynamic_shapes={"x": {0: Dim("b")}}).run_decompositions()
    with pytest.raises(ValueError, match="no usable upper bound"):
        ExecutorchProgramManager({"forward": ep})


def test_specialised_scalar_inputs_keep_their_values():
    class Scale(torch.nn.Module):
        def forward(self, x, n: int, shift: float):
            return x * n + shift

    x = torch.randn(3)
    plan = plan_of(lower(Scale(), (x, 2, 0.5)).buffer)
    assert [type(plan.values[i].val).__name__ for i in plan.inputs] == ["Tensor", "Int", "Double"]
    assert_close(run_et(lower(Scale(), (x, 2, 0.5)).buffer, [x, 2, 0.5]), x * 2 + 0.5)


def test_stack_traces_are_emitted_on_request():
    with torch.no_grad():
        ep = export(MLP(), (torch.randn(2, 8),)).run_decompositions()
    config = ExecutorchBackendConfig(emit_stacktrace=True)
    buffer = ExecutorchProgramManager({"forward": ep}, config=config).buffer
    x = torch.randn(2, 8)
    assert_close(run_et(buffer, [x]), ep.module()(x))
    chain = plan_of(buffer).chains[0]
    assert len(chain.stacktrace) == len(chain.instructions)
    frames = [f for frame_list in chain.stacktrace for f in frame_list.items]
    assert any(f.filename.endswith("test_to_executorch.py") and "self.net(x)" in f.context for f in frames)
    assert plan_of(lower(MLP(), (torch.randn(2, 8),)).buffer).chains[0].stacktrace is None


@pytest.mark.parametrize("remove", [True, False])
def test_static_views_alias_their_base(remove):
    class Reshapes(torch.nn.Module):
        def forward(self, x):
            y = (x + 1).reshape(4, 3)
            return y.reshape(12) * 2, y

    x = torch.randn(3, 4)
    with torch.no_grad():
        ep = export(Reshapes(), (x,)).run_decompositions()
    prog = ExecutorchProgramManager({"forward": ep}, config=ExecutorchBackendConfig(remove_view_copy=remove))
    plan = plan_of(prog.buffer)
    assert str(prog.exported_program().graph).count("memory.view") == (2 if remove else 0)
    assert len(plan.chains[0].instructions) == (2 if remove else 4)
    assert_close(run_et(prog.buffer, [x]), list(Reshapes()(x)))
    if remove:
        add_out = plan.chains[0].instructions[0].instr_args.args[-1]
        alias = plan.values[plan.outputs[1]].val.allocation_info
        assert alias == plan.values[add_out].val.allocation_info


def test_emitter_output_holds_constants_inline_at_their_exact_size():
    linear = torch.nn.Linear(3, 2)
    edge = to_edge(export(linear, (torch.ones(1, 3),)))
    inline = edge.to_executorch()._emitter_output
    sizes = sorted(len(b.storage) for b in inline.program.constant_buffer)
    assert sizes == [0, 2 * 4, 2 * 3 * 4]  # the placeholder, bias, weight: no alignment padding
    assert inline.program.constant_segment.offsets == [] and inline.program.segments == []
    external = edge.to_executorch(ExecutorchBackendConfig(external_constants=True))._emitter_output
    assert len(external.program.constant_buffer) == 1
    (tag,) = external.external_constant_map
    by_fqn = external.external_constant_map[tag]
    assert sorted(by_fqn) == ["bias", "weight"]
    assert external.external_constant_buffer[by_fqn["bias"]] == linear.bias.detach().numpy().tobytes()


class SymbolicScalars(torch.nn.Module):
    """Sizes computed with torch's symbolic functions: each becomes an ``executorch_prim`` instruction."""

    def forward(self, x):
        n, m = x.shape
        chosen = torch.sym_ite(n > 5, n, m)
        flag = torch.sym_float(torch.sym_not(n > 5))
        return torch.zeros(max(chosen, 10)), torch.zeros(min(torch.sym_int(torch.sym_float(n)), 10)), x + flag


def test_symbolic_scalar_functions_become_prim_instructions():
    from tests.oracle import run_executorch_calls

    dims = {"x": {0: Dim("rows", min=1, max=20), 1: Dim("cols", min=1, max=20)}}
    ep = export(SymbolicScalars(), (torch.randn(3, 6),), dynamic_shapes=dims)
    buffer = (
        to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch().buffer
    )  # as ExecuTorch's test
    names = {op.name for op in plan_of(buffer).operators}
    assert {f"executorch_prim::{f}" for f in ("sym_ite", "sym_not", "sym_float", "sym_max", "sym_min")} <= names
    inputs = [torch.randn(3, 6), torch.randn(8, 4), torch.randn(15, 3)]
    theirs = run_executorch_calls(buffer, [[x.numpy()] for x in inputs])
    for x, got in zip(inputs, theirs):
        assert_close([torch.from_numpy(np.asarray(g)) for g in run_et_ours(buffer, x)], SymbolicScalars()(x))
        assert_close([torch.from_numpy(np.asarray(g)) for g in got], SymbolicScalars()(x))


def run_et_ours(buffer: bytes, x: torch.Tensor) -> list:
    from edgetorch.runtime import Runtime

    return Runtime.get().load_program(buffer).load_method("forward").execute([x.numpy()])


def test_a_memory_format_a_program_cannot_name_is_refused_as_executorch_does():
    from edgetorch.exir.error import InternalError

    class ToChannelsLast(torch.nn.Module):
        def forward(self, x):
            return x.to(dtype=torch.float32, memory_format=torch.channels_last)

    ep = export(ToChannelsLast(), (torch.ones(2, 3, 4, 5),))
    with pytest.raises(InternalError, match="memory format torch.channels_last"):
        to_edge(ep, compile_config=EdgeCompileConfig(_skip_dim_order=True)).to_executorch()
    buffer = to_edge(ep).to_executorch().buffer  # as a dim order it is fine
    assert "dim_order_ops::_to_dim_order_copy" in {op.name for op in plan_of(buffer).operators}


def test_edge_ops_name_their_packet():
    from edgetorch.exir.dialects._ops import ops

    assert ops.edge.aten.relu.default._overloadpacket._qualified_op_name == "aten::relu"


@pytest.mark.parametrize(
    "make,order",
    [
        (lambda: torch.arange(32.0).reshape(2, 16).transpose(1, 0), [0, 1]),  # written contiguous
        (lambda: torch.arange(24.0).reshape(1, 2, 3, 4).to(memory_format=torch.channels_last), [0, 2, 3, 1]),
    ],
)
def test_constant_layouts_are_written_as_executorch_writes_them(make, order):
    class Constant(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.constant = make()

        def forward(self):
            return self.constant

    model = Constant()
    program = to_edge(export(model, (), strict=True)).to_executorch()
    plan = program.executorch_program.execution_plan[0]
    tensor = plan.values[plan.outputs[0]].val
    assert list(tensor.dim_order) == order
    stored = np.frombuffer(
        bytes(program.executorch_program.constant_buffer[tensor.data_buffer_idx].storage), np.float32
    )
    np.testing.assert_array_equal(stored, model.constant.permute(order).contiguous().reshape(-1).numpy())
    got = Runtime.get().load_program(program.buffer).load_method("forward").execute([])[0]
    np.testing.assert_array_equal(got, model.constant.numpy())
