"""Whole-program passes and their manager; ``_transform``; the pass registry; ScalarToTensorPass; dim order utils.

A graph pass may rename nodes, and the program's signature must follow; a whole-program pass may
add inputs and constants, and the signature is its own to update. Both kinds run in one schedule.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import ExportedProgram, export
from torch.export.graph_signature import InputKind, InputSpec, TensorArgument

from edgetorch.exir import to_edge
from edgetorch.exir.dialects._ops import ops
from edgetorch.exir.dim_order_utils import get_dim_order, get_memory_format
from edgetorch.exir.error import ExportError
from edgetorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult, PassResult
from edgetorch.exir.pass_manager import ExportedProgramPassManager
from edgetorch.exir.passes import ScalarToTensorPass
from edgetorch.exir.passes.pass_registry import PassRegistry
from edgetorch.exir.program._program import _transform


class _AddTwice(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + x + x


def _edge() -> ExportedProgram:
    return to_edge(export(_AddTwice(), (torch.randn(4),))).exported_program()


def _add_to_mul(gm: torch.fx.GraphModule) -> PassResult:
    changed = False
    for node in gm.graph.nodes:
        if node.target == ops.edge.aten.add.Tensor:
            node.target, changed = ops.edge.aten.mul.Tensor, True
    gm.recompile()
    return PassResult(gm, changed)


class _AddBias(ExportedProgramPassBase):
    """Adds a lifted constant input ``bias`` and adds it to the output."""

    def call(self, ep: ExportedProgram) -> ExportedProgramPassResult:
        graph = ep.graph_module.graph
        first = next(n for n in graph.nodes if n.op == "placeholder")
        with graph.inserting_before(first):
            bias = graph.placeholder("c_bias")
        bias.meta["val"] = first.meta["val"]
        output = graph.output_node()
        (result,) = output.args[0]
        with graph.inserting_before(output):
            total = graph.call_function(ops.edge.aten.add.Tensor, (result, bias))
        total.meta["val"] = result.meta["val"]
        output.args = ((total,),)
        signature = ep.graph_signature
        signature.input_specs = [
            InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument("c_bias"), "bias", persistent=None),
            *signature.input_specs,
        ]
        ep.graph_signature.output_specs[0].arg = TensorArgument(total.name)
        ep.constants["bias"] = torch.full((4,), 10.0)
        return ExportedProgramPassResult(ep, True)


def test_graph_and_program_passes_run_in_one_schedule():
    ep = _edge()
    result = ExportedProgramPassManager([_add_to_mul, [_AddBias()]])(ep)
    assert result.modified
    x = torch.full((4,), 2.0)
    assert torch.equal(result.exported_program.module()(x), x * x * x + 10)


def test_transform_returns_the_same_program_when_nothing_changed():
    ep = _edge()
    assert _transform(ep, lambda gm: PassResult(gm, False)) is ep
    assert _transform(ep, _add_to_mul) is not ep
    with pytest.raises(TypeError, match="separate arguments"):
        _transform(ep, [_add_to_mul])


def test_a_pass_leaving_a_call_method_is_reported_with_its_predecessors():
    def call_method(gm: torch.fx.GraphModule) -> PassResult:
        node = list(gm.graph.nodes)[-2]
        with gm.graph.inserting_after(node):
            gm.graph.call_method("relu", (node,))
        return PassResult(gm, True)

    manager = ExportedProgramPassManager([_add_to_mul, call_method], run_checks_after_each_pass=True)
    with pytest.raises(RuntimeError, match=r"'call_method' failed; it ran after the passes \['_add_to_mul'\]") as err:
        manager(_edge())
    assert isinstance(err.value.__cause__, ExportError)


def test_edge_manager_transform_takes_whole_program_passes():
    manager = to_edge(export(_AddTwice(), (torch.randn(4),))).transform([_AddBias()])
    assert torch.equal(manager.exported_program().module()(torch.zeros(4)), torch.full((4,), 10.0))


def test_scalar_to_tensor_pass_reports_a_change_only_when_it_made_one():
    class AddScalar(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.aten.add.Tensor(x, 2)

    gm = export(AddScalar(), (torch.ones(3),)).graph_module
    result = ScalarToTensorPass()(gm)
    assert result.modified
    assert ScalarToTensorPass()(result.graph_module).modified is False


def test_registry_keeps_the_first_pass_of_a_name():
    @PassRegistry.register()
    def upexir_snake_case_name(gm: torch.fx.GraphModule) -> None:
        pass

    assert PassRegistry.get("upexir_snake_case_name") == [upexir_snake_case_name]
    with pytest.warns(UserWarning, match="already registered"):
        PassRegistry.register_list("upexir_snake_case_name", [print])
    assert PassRegistry.get("upexir_snake_case_name") == [upexir_snake_case_name]
    with pytest.raises(ExportError, match="no pass is registered"):
        PassRegistry.get("upexir_never_registered")


def test_dim_order_utils_map_preserve_format_to_none():
    assert get_dim_order(torch.channels_last, 4) == [0, 2, 3, 1]
    assert get_dim_order(torch.preserve_format, 4) is None
    assert get_memory_format(None) == torch.preserve_format
    assert get_memory_format([0, 1, 2]) == torch.contiguous_format
    with pytest.raises(ValueError, match="channels-last"):
        get_memory_format([1, 0, 2])
