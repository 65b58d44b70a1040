"""The compiler API as ExecuTorch's docs use it: import paths, signatures, printing, Edge dtype checks."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

from edgetorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.memory_planning import greedy, naive
from edgetorch.exir.pass_base import ExportPass
from edgetorch.exir.pass_manager import PassManager
from edgetorch.exir.passes import MemoryPlanningPass
from edgetorch.exir.print_program import inspect_node
from edgetorch.exir.program import to_edge_transform_and_lower
from edgetorch.exir.verification import SpecViolationError
from edgetorch.extension.export_util.utils import save_pte_program
from edgetorch.runtime import Runtime


class AddMul(torch.nn.Module):
    def forward(self, x, y):
        return torch.sigmoid(x + y) * y


ARGS = (torch.randn(2, 3), torch.randn(2, 3))


def edge(model=None, args=ARGS, **kwargs):
    return to_edge(torch.export.export((model or AddMul()).eval(), args), **kwargs)


def run(manager, args=ARGS):
    return Runtime.get().load_program(manager.buffer).load_method("forward").execute([a.numpy() for a in args])


def test_the_tutorials_pass_manager_runs_its_passes_in_order():
    def replace_add_with_div(gm: torch.fx.GraphModule) -> None:
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.add.Tensor:
                node.target = exir_ops.edge.aten.div.Tensor

    def replace_div_with_mul(gm: torch.fx.GraphModule) -> None:
        for node in gm.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.div.Tensor:
                node.target = exir_ops.edge.aten.mul.Tensor

    gm = edge().exported_program().graph_module
    pm = PassManager(
        passes=[replace_add_with_div, replace_div_with_mul],
        run_checks_after_each_pass=True,
        suppress_check_failures=False,
    )
    out = pm(gm).graph_module
    targets = [n.target for n in out.graph.nodes if n.op == "call_function"]
    assert exir_ops.edge.aten.add.Tensor not in targets and exir_ops.edge.aten.div.Tensor not in targets
    assert targets.count(exir_ops.edge.aten.mul.Tensor) == 2
    x, y = ARGS
    torch.testing.assert_close(out(x, y)[0], torch.sigmoid(x * y) * y)


@pytest.mark.parametrize(
    "make",
    [
        lambda: MemoryPlanningPass(memory_planning_algo="naive"),
        lambda: MemoryPlanningPass(memory_planning_algo=naive),
        lambda: MemoryPlanningPass("naive"),
        lambda: MemoryPlanningPass(memory_planning_algo=greedy, allow_lifetime_and_storage_overlap=False),
        lambda: MemoryPlanningPass(memory_planning_algo=None),
    ],
    ids=["name", "callable", "positional", "greedy", "default"],
)
def test_memory_planning_pass_takes_executorchs_keyword(make):
    chain = torch.nn.Sequential(*[torch.nn.ReLU() for _ in range(4)])
    x = (torch.randn(64),)
    planner = make()
    manager = edge(chain, x).to_executorch(ExecutorchBackendConfig(memory_planning_pass=planner))
    plan = manager.memory_plans["forward"]
    aligned = sum(s.aligned_nbytes(plan.alignment) for s in plan.specs)
    if planner.memory_planning_algo is naive:
        assert plan.bufsizes[1] == aligned
    else:
        assert plan.bufsizes[1] < aligned
    np.testing.assert_array_equal(run(manager, x)[0], chain(*x).numpy())


def test_memory_planning_pass_names_the_algorithms_it_knows():
    with pytest.raises(ValueError, match="greedy"):
        MemoryPlanningPass(memory_planning_algo="best")


def test_dump_executorch_program_prints_instructions_or_every_field():
    manager = edge().to_executorch()
    short, full = io.StringIO(), io.StringIO()
    manager.dump_executorch_program(out=short)
    manager.dump_executorch_program(verbose=True, out=full)
    lines = short.getvalue().splitlines()
    assert lines[0] == "method 'forward': 3 instructions"
    assert [line.split()[1] for line in lines[1:]] == ["aten::add.out", "aten::sigmoid.out", "aten::mul.out"]
    assert "0I0:T[2, 3]f32@1+" in lines[1]
    assert "ExecutionPlan(" in full.getvalue() and "name='forward'" in full.getvalue()
    assert "Operator(name='aten::sigmoid', overload='out')" in full.getvalue()


def test_inspect_node_points_at_the_node_and_its_source():
    graph = edge().exported_program().graph
    node = next(n for n in graph.nodes if n.target == exir_ops.edge.aten.sigmoid.default)
    text = inspect_node(graph, node)
    marked = [line for line in text.splitlines() if line.startswith("--> ")]
    assert marked == ["--> " + node.format_node()]
    assert "torch.sigmoid(x + y)" in text


def test_program_module_offers_to_edge_transform_and_lower(tmp_path):
    manager = to_edge_transform_and_lower(torch.export.export(AddMul(), ARGS)).to_executorch()
    path = save_pte_program(manager, "model", str(tmp_path))
    assert path == str(tmp_path / "model.pte")
    got = Runtime.get().load_program(path).load_method("forward").execute(list(ARGS))
    torch.testing.assert_close(got[0], AddMul()(*ARGS))


# --- Edge dtype constraints

DOCUMENTED_SIGMOID_INPUTS = {torch.float32, torch.int8, torch.float64, torch.int16, torch.int32, torch.int64}
DOCUMENTED_SIGMOID_INPUTS |= {torch.uint8, torch.bool}


def test_sigmoid_allowed_types_include_the_documented_ones():
    sigmoid = exir_ops.edge.aten.sigmoid.default
    assert str(sigmoid._schema) == "aten::sigmoid(Tensor self) -> Tensor"
    assert DOCUMENTED_SIGMOID_INPUTS <= sigmoid._schema.arguments[0].allowed_types
    assert sigmoid._schema.returns[0].allowed_types == {torch.float16, torch.bfloat16, torch.float32, torch.float64}
    assert sigmoid._schema.dtype_constraint.validate({"self": torch.int32, "__ret_0": torch.float32})
    assert not sigmoid._schema.dtype_constraint.validate({"self": torch.int32, "__ret_0": torch.int32})
    assert not sigmoid._schema.dtype_constraint.validate({"__ret_0": torch.float32})  # self is essential


# Ops whose allowed dtypes agree with ExecuTorch 1.5.1's table argument for argument; where PyTorch 2.13
# runs more dtypes than the table says (uint16, bool matmul) or the table lists complex views, they differ.
SAME_AS_EXECUTORCH = [
    "sigmoid.default",
    "relu.default",
    "abs.default",
    "add.Tensor",
    "sub.Tensor",
    "div.Tensor",
    "eq.Scalar",
    "_softmax.default",
    "convolution.default",
    "embedding.default",
    "cat.default",
    "view_copy.default",
    "native_layer_norm.default",
    "mean.dim",
    "sum.dim_IntList",
    "_to_copy.default",
    "bmm.default",
    "clamp.default",
    "pow.Tensor_Scalar",
    "hardtanh.default",
]


@pytest.mark.parametrize("name", SAME_AS_EXECUTORCH)
def test_allowed_types_match_executorch(name):
    from executorch.exir.dialects._ops import ops as et_ops

    packet, overload = name.split(".")
    ours = getattr(getattr(exir_ops.edge.aten, packet), overload)._schema
    theirs = getattr(getattr(et_ops.edge.aten, packet), overload)._schema
    for mine, real in zip([*ours.arguments, *ours.returns], [*theirs.arguments, *theirs.returns]):
        assert mine.allowed_types == set(getattr(real, "allowed_types", None) or ()), mine.name


class SigmoidReturnsInt32(ExportPass):
    """Claims, wrongly, that sigmoid gives int32: an Edge op with a dtype combination it does not have."""

    def call(self, graph_module):
        result = super().call(graph_module)
        for node in result.graph_module.graph.nodes:
            if node.target == exir_ops.edge.aten.sigmoid.default:
                node.meta["val"] = node.meta["val"].to(torch.int32)
        return result


def test_transform_rejects_an_edge_op_outside_its_dtypes():
    with pytest.raises(SpecViolationError, match=r"aten.sigmoid.default.*self: float32, __ret_0: int32"):
        edge().transform([SigmoidReturnsInt32()])
    checked_off = EdgeCompileConfig(_check_ir_validity=False)
    edge(compile_config=checked_off).transform([SigmoidReturnsInt32()], compile_config=checked_off)


class ReluOnBool(ExportPass):
    """Feeds relu a bool tensor, which relu has no kernel for."""

    def call_operator(self, op, args, kwargs, meta):
        if op == exir_ops.edge.aten.sigmoid.default:
            flag = super().call_operator(exir_ops.edge.aten.gt.Scalar, (args[0], 0.0), {}, meta)
            return super().call_operator(exir_ops.edge.aten.relu.default, (flag,), {}, meta)
        return super().call_operator(op, args, kwargs, meta)


def test_an_input_dtype_the_op_lacks_is_rejected_with_what_it_allows():
    with pytest.raises(SpecViolationError, match=r"relu.*self: bool.*allowed.*self in \{.*float32"):
        edge().transform([ReluOnBool()])
