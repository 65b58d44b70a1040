"""ExportPass rewrites (one-to-one, one-to-many, one-to-none), PassManager checks, transform semantics."""

import pytest
import torch
from torch import nn

from edgetorch.exir import EdgeCompileConfig, to_edge
from edgetorch.exir.dialects._ops import exir_ops
from edgetorch.exir.pass_base import ExportPass, PassBase, PassManager, PassResult
from edgetorch.exir.verification import SpecViolationError

edge = exir_ops.edge.aten


class ConvRelu(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


class AddMulDiv(nn.Module):
    def forward(self, x, y):
        return (x + y) * y / (x - y).abs().add(1)


class ConvertReluToSigmoid(ExportPass):
    def call_operator(self, op, args, kwargs, meta):
        if op == exir_ops.edge.aten.relu.default:
            return super().call_operator(exir_ops.edge.aten.sigmoid.default, args, kwargs, meta)
        else:
            return super().call_operator(op, args, kwargs, meta)


class ReplaceAddWithMulSub(ExportPass):
    """x + y -> (x * y) - y"""

    def call_operator(self, op, args, kwargs, meta):
        if op != edge.add.Tensor:
            return super().call_operator(op, args, kwargs, meta)
        x, y = args
        product = super().call_operator(edge.mul.Tensor, (x, y), {}, meta)
        return super().call_operator(edge.sub.Tensor, (product, y), {}, meta)


class RemoveAbs(ExportPass):
    def call_operator(self, op, args, kwargs, meta):
        if op == edge.abs.default:
            return args[0]
        return super().call_operator(op, args, kwargs, meta)


def _targets(program):
    return [n.target for n in program.graph_module.graph.nodes if n.op == "call_function"]


@pytest.fixture
def conv_relu():
    x = torch.randn(1, 3, 6, 6)
    return ConvRelu(), x, to_edge(torch.export.export(ConvRelu(), (x,)))


def test_one_to_one_rewrite_keeps_meta_and_leaves_receiver_unchanged(conv_relu):
    model, x, manager = conv_relu
    transformed = manager.transform((ConvertReluToSigmoid(),))
    targets = _targets(transformed.exported_program())
    assert edge.sigmoid.default in targets and edge.relu.default not in targets
    assert edge.relu.default in _targets(manager.exported_program())
    torch.testing.assert_close(transformed.exported_program().module()(x), torch.sigmoid(model.conv(x)))
    (sigmoid,) = [n for n in transformed.exported_program().graph.nodes if n.target == edge.sigmoid.default]
    assert sigmoid.meta["val"].shape == (1, 4, 6, 6) and sigmoid.meta["val"].dtype == torch.float32
    assert "forward" in sigmoid.meta["stack_trace"]


def test_one_to_many_rewrite_runs_like_the_rewritten_program():
    x, y = torch.randn(4), torch.rand(4) + 0.5
    manager = to_edge(torch.export.export(AddMulDiv(), (x, y)))
    out = manager.transform([ReplaceAddWithMulSub()]).exported_program()
    assert edge.add.Tensor not in _targets(out)
    expected = ((x * y) - y) * y / ((x - y).abs() * 1 - 1)
    torch.testing.assert_close(out.module()(x, y), expected)


def test_one_to_none_rewrite_drops_the_op():
    x, y = torch.randn(4), torch.randn(4)
    manager = to_edge(torch.export.export(AddMulDiv(), (x, y)))
    out = manager.transform([RemoveAbs()]).exported_program()
    assert edge.abs.default not in _targets(out)
    torch.testing.assert_close(out.module()(x, y), (x + y) * y / ((x - y) + 1))


def test_plain_function_pass_and_dict_form():
    def double_output(gm):
        out = gm.graph.output_node()
        (value,) = out.args[0]
        with gm.graph.inserting_before(out):
            doubled = gm.graph.call_function(edge.mul.Scalar, (value, 2.0))
        doubled.meta = dict(value.meta)
        out.args = ((doubled,),)
        gm.recompile()
        return PassResult(gm, True)

    encode = torch.export.export(nn.Linear(3, 2), (torch.randn(1, 3),))
    decode = torch.export.export(nn.Linear(2, 3), (torch.randn(1, 2),))
    manager = to_edge({"encode": encode, "decode": decode})
    out = manager.transform({"encode": [double_output]})
    x = torch.randn(1, 3)
    plain = manager.exported_program("encode").module()(x)
    torch.testing.assert_close(out.exported_program("encode").module()(x), plain * 2)
    assert _targets(out.exported_program("decode")) == _targets(manager.exported_program("decode"))


def test_pass_emitting_aten_op_is_rejected_with_source_line(conv_relu):
    class BackToAten(ExportPass):
        def call_operator(self, op, args, kwargs, meta):
            if op == edge.relu.default:
                return super().call_operator(torch.ops.aten.relu.default, args, kwargs, meta)
            return super().call_operator(op, args, kwargs, meta)

    _, _, manager = conv_relu
    with pytest.raises(SpecViolationError, match=r"aten.relu.default is an ATen op.*test_pass_base.py"):
        manager.transform([BackToAten()])
    unchecked = manager.transform([BackToAten()], compile_config=EdgeCompileConfig(_check_ir_validity=False))
    assert torch.ops.aten.relu.default in _targets(unchecked.exported_program())


def test_unsupported_dtype_is_rejected(conv_relu):
    class ToComplex(ExportPass):
        def call_operator(self, op, args, kwargs, meta):
            out = super().call_operator(op, args, kwargs, meta)
            if op == edge.relu.default:
                return super().call_operator(edge._to_copy.default, (out,), {"dtype": torch.complex32}, meta)
            return out

    _, _, manager = conv_relu
    with pytest.raises(SpecViolationError, match="complex32"):
        manager.transform([ToComplex()])


def _replace_add_with_div(gm):
    for node in gm.graph.nodes:
        if node.target == edge.add.Tensor:
            node.target = edge.div.Tensor
    return PassResult(gm, True)


def _replace_div_with_mul(gm):
    for node in gm.graph.nodes:
        if node.target == edge.div.Tensor:
            node.target = edge.mul.Tensor
    return PassResult(gm, True)


def _check_no_div(gm):
    if any(n.target == edge.div.Tensor for n in gm.graph.nodes):
        raise ValueError("found a div")


def _add_graph():
    class Add(nn.Module):
        def forward(self, x, y):
            return x + y

    return to_edge(torch.export.export(Add(), (torch.randn(2), torch.randn(2)))).exported_program().graph_module


def test_pass_manager_checks_after_each_pass():
    pm = PassManager(passes=[_replace_add_with_div, _replace_div_with_mul], run_checks_after_each_pass=True)
    pm.add_checks(_check_no_div)
    with pytest.raises(ValueError, match="found a div"):
        pm(_add_graph())

    quiet = PassManager(
        passes=[[_replace_add_with_div], _replace_div_with_mul],
        run_checks_after_each_pass=True,
        suppress_check_failures=True,
    )
    quiet.add_checks(_check_no_div)
    result = quiet(_add_graph())
    assert result.modified and edge.mul.Tensor in [n.target for n in result.graph_module.graph.nodes]


def test_pass_manager_rejects_call_method():
    def add_method_call(gm):
        out = gm.graph.output_node()
        with gm.graph.inserting_before(out):
            gm.graph.call_method("sum", (out.args[0][0],))
        return PassResult(gm, True)

    pm = PassManager([add_method_call], run_checks_after_each_pass=True)
    with pytest.raises(ValueError, match="call_method"):
        pm(_add_graph())


def test_requires_runs_before_call():
    calls = []

    class NeedsAdd(PassBase):
        def requires(self, gm):
            if not any(n.target == edge.add.Tensor for n in gm.graph.nodes):
                raise ValueError("No torch.add ops!")

        def call(self, gm):
            calls.append(gm)
            return PassResult(gm, False)

    gm = _replace_add_with_div(_add_graph()).graph_module
    with pytest.raises(ValueError, match="No torch.add ops!"):
        PassManager([NeedsAdd()])(gm)
    assert calls == []
