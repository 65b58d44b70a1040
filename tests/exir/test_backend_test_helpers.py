"""The backend API names ExecuTorch's own backend tests use: the demo partitioners, to_backend over several
methods, the delegate payload and graph helpers, the partition checks, patch_forward and extension.pytree."""

from __future__ import annotations

import pytest
import torch
from torch.export import export

from edgetorch.exir import to_edge
from edgetorch.exir.backend.backend_api import MethodProgramsPartitionerSpec, to_backend
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.backend.test.op_partitioner_demo import (
    AddAttributePartitionerDemo,
    AddMulPartitionerDemo,
    AllNodesPartitionerDemo,
    NonDecompTestPartitioner,
)
from edgetorch.exir.backend.utils import (
    get_delegated_payload,
    get_delegates,
    get_non_lowered_nodes,
    is_identical_graph,
)
from edgetorch.exir.capture._capture import patch_forward
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.program import to_edge_transform_and_lower
from edgetorch.runtime import Runtime


class AddWeight(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return torch.sin(x + self.w + x)


ARGS = (torch.randn(3),)


def test_add_attribute_partitioner_moves_the_weight_into_the_delegate():
    model = AddWeight()
    lowered = to_edge(export(model, ARGS)).to_backend(AddAttributePartitionerDemo())
    program = lowered.exported_program()
    assert len(get_delegates(program.graph)) == 1
    assert program.state_dict == {} and list(program.graph_signature.parameters) == []
    assert [n.target for n in get_non_lowered_nodes(program.graph)] == [exir_ops.edge.aten.sin.default]
    payloads = get_delegated_payload(program.graph_module)
    ((backend_id, specs, blob),) = payloads.values()
    assert list(payloads) == ["lowered_module_0"] and backend_id == "BackendWithCompilerDemo"
    assert specs == [] and len(blob) > 0
    torch.testing.assert_close(program.module()(*ARGS), model(*ARGS))


def test_all_nodes_partitioner_tags_every_call_for_the_executor_backend():
    edge = to_edge(export(AddWeight(), ARGS)).exported_program()
    result = AllNodesPartitionerDemo().partition(edge)
    assert {spec.backend_id for spec in result.partition_tags.values()} == {"ExecutorBackend"}
    calls = [n for n in edge.graph.nodes if n.op == "call_function"]
    weight = next(n for n in edge.graph.nodes if n.op == "placeholder" and n.name.startswith("p_"))
    assert all("delegation_tag" in n.meta for n in [*calls, weight])


class LinearAndRelu(torch.nn.Module):
    def __init__(self, bias: bool) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4, bias=bias)

    def forward(self, x):
        return torch.relu(self.linear(x))


def test_non_decomp_partitioner_keeps_a_biased_linear_whole_in_its_own_delegate():
    model, x = LinearAndRelu(bias=True), torch.randn(2, 4)
    manager = to_edge_transform_and_lower(export(model, (x,)), partitioner=[NonDecompTestPartitioner()])
    method = Runtime.get().load_program(manager.to_executorch().buffer).load_method("forward")
    torch.testing.assert_close(torch.from_numpy(method.execute([x.numpy()])[0]), model(x))

    def lower(bias: bool):
        program = export(LinearAndRelu(bias), (x,))
        return to_edge_transform_and_lower(program, partitioner=[NonDecompTestPartitioner()]).exported_program()

    program = lower(bias=True)
    (delegate,) = get_delegates(program.graph)
    module = getattr(program.graph_module, delegate.name)
    assert exir_ops.edge.aten.linear.default in [n.target for n in module.original_module.graph.nodes]
    assert [n.target for n in get_non_lowered_nodes(program.graph)] == [exir_ops.edge.aten.relu.default]
    # a bias-free linear is not kept: it decomposes and nothing is delegated
    program = lower(bias=False)
    assert get_delegates(program.graph) == []
    assert exir_ops.edge.aten.mm.default in [n.target for n in program.graph.nodes]


def test_to_backend_over_several_methods_lowers_only_those_with_a_partitioner():
    class Chain(torch.nn.Module):
        def forward(self, a, b):
            return torch.mm(a, b) + b

    args = (torch.randn(2, 2), torch.randn(2, 2))
    programs = to_edge({"forward": export(Chain(), args), "other": export(Chain(), args)})
    spec = MethodProgramsPartitionerSpec(
        {m: programs.exported_program(m) for m in ("forward", "other")}, {"forward": AddMulPartitionerDemo()}
    )
    lowered = to_backend(spec)
    assert len(get_delegates(lowered["forward"].graph)) == 1 and get_delegates(lowered["other"].graph) == []
    with pytest.raises(TypeError, match="MethodProgramsPartitionerSpec"):
        to_backend(3)


class _TagOnly(Partitioner):
    """Tags the nodes ``pick`` chooses for the demo backend."""

    def __init__(self, pick) -> None:
        super().__init__()
        self.pick = pick

    def partition(self, exported_program):
        for node in exported_program.graph.nodes:
            if self.pick(node):
                node.meta["delegation_tag"] = "tag0"
        return PartitionResult(exported_program, {"tag0": DelegationSpec("BackendWithCompilerDemo", [])})


def test_a_partitioner_may_not_tag_the_output_or_a_user_input():
    program = to_edge(export(AddWeight(), ARGS)).exported_program()
    with pytest.raises(RuntimeError, match="output node output should not be tagged"):
        to_backend(program, _TagOnly(lambda n: n.op == "output"))
    with pytest.raises(RuntimeError, match="placeholder node for non-params.*should not be tagged: x"):
        to_backend(program, _TagOnly(lambda n: n.op == "placeholder" and n.name == "x"))


def test_is_identical_graph_compares_structure_not_names():
    class A(torch.nn.Module):
        def forward(self, x):
            return torch.sin(x) + torch.cos(x)

    class B(torch.nn.Module):
        def forward(self, x):
            return torch.cos(x) + torch.sin(x)

    a1, a2, b = (export(m, ARGS).graph_module for m in (A(), A(), B()))
    assert is_identical_graph(a1, a2)
    assert not is_identical_graph(a1, b)


def test_patch_forward_exports_another_method_and_restores_forward():
    class TwoMethods(torch.nn.Module):
        def forward(self, x):
            return x + 1

        def triple(self, x):
            return x * 3

    model = TwoMethods()
    with patch_forward(model, TwoMethods.triple):
        program = export(model, ARGS)
    torch.testing.assert_close(program.module()(*ARGS), ARGS[0] * 3)
    torch.testing.assert_close(model(*ARGS), ARGS[0] + 1)
    with pytest.raises(ValueError), patch_forward(model, TwoMethods.triple):
        raise ValueError("inside")
    torch.testing.assert_close(model(*ARGS), ARGS[0] + 1)


def test_extension_pytree_round_trips_a_spec_through_its_text():
    from edgetorch.extension.pytree import broadcast_to_and_flatten, from_str, tree_flatten, tree_unflatten

    tree = {"a": (torch.ones(1), 2), "b": [3]}
    leaves, spec = tree_flatten(tree)
    assert len(leaves) == 3
    again = tree_unflatten(leaves, from_str(spec.to_str()))
    assert list(again) == ["a", "b"] and again["b"] == [3]
    assert broadcast_to_and_flatten(7, spec) == [7, 7, 7]
