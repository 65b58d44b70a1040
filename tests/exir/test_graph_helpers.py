"""Graph helpers at ExecuTorch's paths: ``graph_module._get_submodule`` and ``arrange_graph_outputs``."""

from __future__ import annotations

import operator

import pytest
import torch
from torch.export.graph_signature import OutputKind, OutputSpec, TensorArgument

from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.graph_module import _get_submodule
from edgetorch.exir.lowered_backend_module import arrange_graph_outputs


def _spec(kind: OutputKind, name: str, target: str | None = None) -> OutputSpec:
    return OutputSpec(kind=kind, arg=TensorArgument(name=name), target=target)


def test_get_submodule_returns_the_cond_branches() -> None:
    class Branchy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))

    gm = torch.export.export(Branchy(), (torch.ones(2),)).graph_module
    cond = next(n for n in gm.graph.nodes if n.target is torch.ops.higher_order.cond)
    name, module, node = _get_submodule(gm, cond, 1)
    assert node is cond and module is getattr(gm, name)
    assert _get_submodule(gm, cond, 2)[1] is not module
    with pytest.raises(InvalidArgumentError, match="get_attr"):
        _get_submodule(gm, cond, 0)


def test_arrange_graph_outputs_moves_mutations_first_and_remaps_getitems() -> None:
    sub = torch.fx.Graph()
    x, buf = sub.placeholder("x"), sub.placeholder("buf")
    user_a = sub.call_function(torch.ops.aten.add.Tensor, (x, x))
    mutation = sub.call_function(torch.ops.aten.mul.Tensor, (buf, x))
    user_b = sub.call_function(torch.ops.aten.sub.Tensor, (x, x))
    sub.output((user_a, mutation, user_b))
    sub_gm = torch.fx.GraphModule({}, sub)
    specs = [
        _spec(OutputKind.USER_OUTPUT, "add"),
        _spec(OutputKind.BUFFER_MUTATION, "mul", "buf"),
        _spec(OutputKind.USER_OUTPUT, "sub"),
    ]
    parent = torch.fx.Graph()
    call = parent.call_module("sub_mod", (parent.placeholder("x"),))
    reads = [parent.call_function(operator.getitem, (call, i)) for i in range(3)]
    parent.output(tuple(reads))

    arrange_graph_outputs(sub_gm, specs, call)

    out = next(n for n in sub_gm.graph.nodes if n.op == "output")
    assert list(out.args[0]) == [mutation, user_a, user_b]
    assert [s.kind for s in specs] == [OutputKind.BUFFER_MUTATION, OutputKind.USER_OUTPUT, OutputKind.USER_OUTPUT]
    assert [r.args[1] for r in reads] == [1, 0, 2]
    with pytest.raises(InvalidArgumentError, match="one output spec per graph output"):
        arrange_graph_outputs(sub_gm, specs[:2], call)


def test_legacy_capture_chain_lowers_a_plain_function() -> None:
    from edgetorch import exir

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.add(torch.add(x, x), x)

    with pytest.warns(DeprecationWarning):
        captured = exir.capture(f, (torch.randn(4),), exir.CaptureConfig())
    x = torch.randn(4)
    torch.testing.assert_close(captured(x), 3 * x)
    edge = captured.to_edge()
    assert edge.after_to_edge_passes
    targets = [n.target for n in edge.exported_program.graph.nodes if n.op == "call_function"]
    assert targets == [exir.exir_ops.edge.aten.add.Tensor] * 2
    assert edge.to_executorch().buffer[4:8] == b"ET12"
    with pytest.raises(InvalidArgumentError, match="tuple"):
        exir.capture(f, [torch.randn(4)])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="already in the Edge"):
        edge.to_edge()
