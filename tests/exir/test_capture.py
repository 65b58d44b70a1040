"""Legacy capture API: dynamic_dim constraints -> torch.export Dims, plain functions, clear errors."""

import pytest
import torch
from torch import nn

from edgetorch.exir.capture import capture_pre_autograd_graph, dynamic_dim, export


def add(x, y):
    return x + y


def _tutorial_constraints(args):
    return [
        dynamic_dim(args[0], 1),
        1 <= dynamic_dim(args[0], 1),
        dynamic_dim(args[0], 1) <= 10,
        dynamic_dim(args[1], 1) == dynamic_dim(args[0], 1),
    ]


def test_static_export_of_a_plain_function_rejects_other_shapes():
    args = (torch.randn(3, 3), torch.randn(3, 3))
    ep = export(add, args)
    assert [n.name for n in ep.graph.nodes if n.op == "placeholder"] == ["x", "y"]
    torch.testing.assert_close(ep.module()(torch.ones(3, 3), torch.ones(3, 3)), torch.full((3, 3), 2.0))
    with pytest.raises(Exception, match="Guard failed|Expected input"):
        ep.module()(torch.ones(3, 2), torch.ones(3, 2))


def test_tutorial_constraints_give_one_bounded_symbol():
    args = (torch.randn(3, 3), torch.randn(3, 3))
    ep = export(add, args, constraints=_tutorial_constraints(args))
    (bounds,) = ep.range_constraints.values()
    assert (bounds.lower, bounds.upper) == (1, 10)
    x, y = [n.meta["val"] for n in ep.graph.nodes if n.op == "placeholder"]
    assert x.shape[1] is y.shape[1] or str(x.shape[1]) == str(y.shape[1])
    module = ep.module()
    torch.testing.assert_close(module(torch.ones(3, 2), torch.ones(3, 2)), torch.full((3, 2), 2.0))
    with pytest.raises(AssertionError, match="<= 10"):
        module(torch.ones(3, 15), torch.ones(3, 15))
    with pytest.raises(AssertionError, match="=="):
        module(torch.ones(3, 3), torch.ones(3, 2))


def test_capture_then_export_like_the_tutorial():
    args = (torch.randn(3, 3), torch.randn(3, 3))
    constraints = _tutorial_constraints(args)
    graph = capture_pre_autograd_graph(add, args, constraints=constraints)
    assert isinstance(graph, torch.fx.GraphModule)
    ep = export(graph, args, constraints=constraints)
    torch.testing.assert_close(ep.module()(torch.ones(3, 7), torch.ones(3, 7)), torch.full((3, 7), 2.0))


def test_kwargs_and_strict_bounds():
    def scale(x, *, factor):
        return x * factor

    x, factor = torch.randn(2, 4), torch.randn(2, 4)
    constraints = [dynamic_dim(x, 0) > 1, dynamic_dim(x, 0) < 9, dynamic_dim(factor, 0) == dynamic_dim(x, 0)]
    ep = export(scale, (x,), {"factor": factor}, constraints=constraints)
    (bounds,) = ep.range_constraints.values()
    assert (bounds.lower, bounds.upper) == (2, 8)
    a, b = torch.randn(5, 4), torch.randn(5, 4)
    torch.testing.assert_close(ep.module()(a, factor=b), a * b)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda x, y: [dynamic_dim(x, 5)], "out of range"),
        (lambda x, y: [dynamic_dim(x, 1) <= 2.5], "must be an int"),
        (lambda x, y: [dynamic_dim(x, 1) == 3], "only be equal to another dynamic_dim"),
        (lambda x, y: ["x.shape[1] <= 10"], "must be dynamic_dim"),
        (lambda x, y: [dynamic_dim(torch.randn(3, 3), 1)], "not one of the example inputs"),
        (lambda x, y: [4 <= dynamic_dim(x, 1), dynamic_dim(x, 1) <= 2], "empty range"),
    ],
)
def test_malformed_constraints_raise_value_error(make, message):
    args = (torch.randn(3, 3), torch.randn(3, 3))
    with pytest.raises(ValueError, match=message):
        export(add, args, constraints=make(*args))


def test_untraceable_model_error_carries_a_hint():
    class DataDependent(nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    with pytest.raises(Exception, match="Could not guard|data-dependent|Data-dependent") as info:
        export(DataDependent(), (torch.randn(3),))
    assert any("edgetorch" in note for note in getattr(info.value, "__notes__", []))
