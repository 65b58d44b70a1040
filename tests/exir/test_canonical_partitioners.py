"""ExecuTorch's canonical partitioners: pattern/op-support partitions, all-node, config-based, dequant duplication."""

from __future__ import annotations

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401  (defines quantized_decomposed ops)
from torch.export import export
from torch.fx.passes.operator_support import OperatorSupportBase

from edgetorch.backends.demo.compiler import BackendWithCompilerDemo
from edgetorch.exir import to_edge, to_edge_transform_and_lower
from edgetorch.exir.backend.canonical_partitioners.all_node_partitioner import AllNodePartitioner
from edgetorch.exir.backend.canonical_partitioners.config_partitioner import (
    ConfigerationBasedPartitioner,
    PartitionerConfig,
    format_target_name,
)
from edgetorch.exir.backend.canonical_partitioners.duplicate_dequant_node_pass import DuplicateDequantNodePass
from edgetorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
from edgetorch.exir.backend.partitioner import DelegationSpec
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.lowered_backend_module import get_lowered_backend_modules
from edgetorch.runtime import Runtime

aten = torch.ops.aten
DEMO = BackendWithCompilerDemo.__name__


class Chain(torch.nn.Module):
    def forward(self, a, x, b):
        y = torch.mm(a, x) + b
        y = y - a
        return torch.mm(y, x) + b


ARGS = (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2))


def _ops(partition) -> list:
    return sorted(str(to_aten(n.target)) for n in partition.nodes)


class MmOnly(OperatorSupportBase):
    def is_node_supported(self, submodules, node):
        return node.op == "call_function" and to_aten(node.target) is aten.mm.default


def test_pattern_op_partitions_from_op_support_patterns_and_node_lists():
    gm = to_edge(export(Chain(), ARGS)).exported_program().graph_module
    by_support = generate_pattern_op_partitions(gm, op_support=MmOnly())
    assert sorted(_ops(p) for p in by_support) == [["aten.mm.default"], ["aten.mm.default"]]

    pattern = torch.fx.Graph()
    a, x, b = (pattern.placeholder(name) for name in "axb")
    mm = pattern.call_function(exir_ops.edge.aten.mm.default, (a, x))
    pattern.output(pattern.call_function(exir_ops.edge.aten.add.Tensor, (mm, b)))
    by_pattern = generate_pattern_op_partitions(gm, patterns=[pattern])
    assert sorted(_ops(p) for p in by_pattern) == [["aten.add.Tensor", "aten.mm.default"]] * 2

    sub = next(n for n in gm.graph.nodes if n.op == "call_function" and to_aten(n.target) is aten.sub.Tensor)
    listed = generate_pattern_op_partitions(gm, partitions_list=[[sub]], op_support=MmOnly())
    assert sorted(_ops(p) for p in listed) == [["aten.mm.default"], ["aten.mm.default", "aten.sub.Tensor"]]


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, x):
        return torch.mm(x, self.w) * x + x


def _run(buffer: bytes, args: tuple) -> torch.Tensor:
    method = Runtime.get().load_program(buffer).load_method("forward")
    return torch.from_numpy(method.execute([a.numpy() for a in args])[0])


def test_all_node_partitioner_hands_the_whole_program_and_its_weights_to_one_backend():
    model, args = Affine(), (torch.randn(2, 3),)
    manager = to_edge(export(model, args)).to_backend(AllNodePartitioner(DEMO, []))
    program = manager.exported_program()
    (module,) = get_lowered_backend_modules(program.graph_module)
    assert module.backend_id == DEMO and "w" in module.original_module.state_dict
    assert not program.state_dict and [n.op for n in program.graph.nodes].count("call_function") == 2  # call, item
    torch.testing.assert_close(_run(manager.to_executorch().buffer, args), model(*args))


class AddConfig(PartitionerConfig):
    target_name = "add.Tensor"

    def check_constraints(self, node, ep):
        return all(a.meta["val"].dim() == 2 for a in node.all_input_nodes)

    def get_original_aten(self):
        return None

    def get_partition(self, node, ep):
        return [node]


class MmConfig(AddConfig):
    target_name = "mm.default"


def test_config_partitioner_delegates_what_its_configs_accept():
    assert format_target_name("aten.add.Tensor") == "add.Tensor"
    assert format_target_name("add.Tensor") == "add.Tensor"
    partitioner = ConfigerationBasedPartitioner(DelegationSpec(DEMO, []), [AddConfig(), MmConfig()])
    manager = to_edge_transform_and_lower(export(Chain(), ARGS), partitioner=[partitioner])
    modules = get_lowered_backend_modules(manager.exported_program().graph_module)
    kept = [to_aten(n.target) for n in manager.exported_program().graph.nodes if n.op == "call_function"]
    assert len(modules) == 2 and aten.sub.Tensor in kept and aten.mm.default not in kept
    torch.testing.assert_close(_run(manager.to_executorch().buffer, ARGS), Chain()(*ARGS))
    try:
        ConfigerationBasedPartitioner(DelegationSpec(DEMO, []), [AddConfig(), AddConfig()])
    except ValueError as error:
        assert "both claim 'add.Tensor'" in str(error)
    else:
        raise AssertionError("two configs for one op must be refused")


def test_duplicate_dequant_node_pass_gives_each_user_its_own_dequantize():
    q = torch.ops.quantized_decomposed

    class TwoUsers(torch.nn.Module):
        def forward(self, x):
            d = q.dequantize_per_tensor.default(x, 0.5, 0, -128, 127, torch.int8)
            return torch.relu(d), torch.sigmoid(d)

    x = torch.randint(-10, 10, (4,), dtype=torch.int8)
    gm = export(TwoUsers(), (x,)).module()
    expected = gm(x)
    result = DuplicateDequantNodePass()(gm)
    dequants = [n for n in result.graph_module.graph.nodes if n.target is q.dequantize_per_tensor.default]
    assert result.modified and len(dequants) == 2 and all(len(n.users) == 1 for n in dequants)
    for got, want in zip(result.graph_module(x), expected):
        torch.testing.assert_close(got, want)
    assert not DuplicateDequantNodePass()(result.graph_module).modified


def test_duplicate_constant_node_gives_each_user_its_own_weight():
    from edgetorch.exir.backend.canonical_partitioners.duplicate_constant_node_pass import duplicate_constant_node
    from edgetorch.exir.to_executorch import ExecutorchProgramManager

    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.b = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):
            return (x + self.b) * self.b - self.b

    model, x = Shared(), torch.randn(2, 3)
    program = to_edge(export(model, (x,))).exported_program()
    weight = next(iter(program.graph_signature.inputs_to_parameters))
    assert duplicate_constant_node(program, weight) == {f"{weight}_copy_0", f"{weight}_copy_1"}
    users = [len(n.users) for n in program.graph.nodes if n.op == "placeholder" and n.name.startswith(weight)]
    assert users == [1, 1, 1]
    torch.testing.assert_close(program.module()(x), model(x))
    assert duplicate_constant_node(program, "no_such_node") == set()
    torch.testing.assert_close(_run(ExecutorchProgramManager(program).buffer, (x,)), model(x))
