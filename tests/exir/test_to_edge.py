"""to_edge: the Edge graph holds only portable-library ops, matches real ExecuTorch's op set, and runs like eager."""

import collections
import collections.abc
import operator
import re
import typing
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

# Imported before any edgetorch lowering so both define the shared dim_order_ops library once.
et_exir = pytest.importorskip("executorch.exir")

from edgetorch.exir import EdgeCompileConfig, to_edge  # noqa: E402
from edgetorch.exir.dialects._ops import EdgeOpOverload, exir_ops  # noqa: E402
from edgetorch.exir.verification import SpecViolationError  # noqa: E402


class Add2(nn.Module):
    def forward(self, x):
        return x + 2.0


class Permute(nn.Module):
    def forward(self, x):
        return x.permute(1, 0) * 3


class ChannelsLast(nn.Module):
    def forward(self, x):
        return x.to(memory_format=torch.channels_last) + 1


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))

    def forward(self, x):
        self.buf.add_(x)
        return self.buf.clone()


class Cond(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x)[0]


class Views(nn.Module):
    def forward(self, x):
        a, b = x.split(2, dim=1)
        return a.t().contiguous().view(-1), x[0, 1:3], x.unsqueeze(0).expand(2, 4, 4), b.squeeze(), x.transpose(0, 1)


class MixedTypes(nn.Module):
    def forward(self, x, i):
        return x + i, (i * 2).float(), x.to(torch.float16), x.clone()


class Causal(nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _models():
    torch.manual_seed(0)
    conv = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 2),
    )
    return {
        "add_scalar": (Add2(), (torch.randn(3),)),
        "permute": (Permute(), (torch.randn(2, 3),)),
        "channels_last": (ChannelsLast(), (torch.randn(1, 3, 4, 4),)),
        "cond": (Cond(), (torch.randn(4),)),
        "mlp": (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (torch.randn(2, 8),)),
        "conv": (conv.eval(), (torch.randn(1, 3, 8, 8),)),
        "transformer": (
            nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0).eval(),
            (torch.randn(2, 5, 16),),
        ),
        "lstm": (nn.LSTM(4, 8, batch_first=True), (torch.randn(2, 3, 4),)),
        "attention": (Attention().eval(), (torch.randn(2, 5, 16),)),
        "views": (Views(), (torch.randn(4, 4),)),
        "mixed_types": (MixedTypes(), (torch.randn(2, 3), torch.tensor([1, 2, 3]))),
        "causal_sdpa": (Causal(), tuple(torch.randn(1, 2, 4, 8) for _ in range(3))),
        "norms": (nn.Sequential(nn.LayerNorm(8), nn.GELU(), nn.Softmax(-1)), (torch.randn(2, 8),)),
    }


MODELS = _models()
# Models whose op set is also compared with real ExecuTorch's to_edge (the rest: portable + eager checks only).
ORACLE = {"permute", "channels_last", "cond", "conv", "lstm", "attention", "views", "mixed_types", "causal_sdpa"}


def _unwrap(target):
    """The torch op behind an edge op (ours or ExecuTorch's); other targets as they are."""
    return target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", target)


def _op_name(target):
    target = _unwrap(target)
    return target.name() if hasattr(target, "name") and callable(target.name) else str(target)


def _op_counts(graph_module):
    counts = collections.Counter()
    for module in graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if node.op == "call_function":
                    counts[_op_name(node.target)] += 1
    return counts


def _portable_op_names():
    yaml = Path(et_exir.__file__).parent.parent / "kernels" / "portable" / "functions.yaml"
    text = yaml.read_text()
    names = set(re.findall(r"^- op: (\w+)\.", text, re.M))
    names |= {m.split("::")[-1] for m in re.findall(r"^- func: ([\w:]+)\.", text, re.M)}
    return names


@pytest.fixture(scope="module")
def portable_ops():
    return _portable_op_names()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_edge_graph_matches_executorch_and_eager(name, portable_ops):
    model, args = MODELS[name]
    ep = torch.export.export(model, args)
    edge = to_edge(ep).exported_program()
    if name in ORACLE:
        expected = et_exir.to_edge(torch.export.export(model, args)).exported_program()
        assert _op_counts(edge.graph_module) == _op_counts(expected.graph_module)
    for module in edge.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if node.op != "call_function" or node.target is operator.getitem:
                continue
            if isinstance(node.target, torch._ops.HigherOrderOperator):
                continue
            op = _unwrap(node.target)
            assert op._opname in portable_ops, f"{op} has no portable kernel"

    torch.testing.assert_close(edge.module()(*args), model(*args))


def test_every_operator_target_is_an_edge_op():
    model, args = MODELS["conv"]
    gm = to_edge(torch.export.export(model, args)).exported_program().graph_module
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert exir_ops.edge.aten.relu.default in targets
    assert all(isinstance(t, EdgeOpOverload) or t is operator.getitem for t in targets)
    assert str(exir_ops.edge.aten.relu.default.__module__).startswith("edgetorch.exir.dialects.edge._ops")
    handles = [n.meta["debug_handle"] for n in gm.graph.nodes if n.op == "call_function"]
    # as ExecuTorch numbers them: from 1 in graph order, shared by the nodes one source op decomposed into
    assert handles == sorted(handles) and sorted(set(handles)) == list(range(1, max(handles) + 1))


def test_scalars_become_lifted_tensor_constants():
    edge = to_edge(torch.export.export(Add2(), (torch.randn(3),))).exported_program()
    (add,) = [n for n in edge.graph.nodes if n.op == "call_function"]
    assert all(isinstance(a, torch.fx.Node) for a in add.args)
    (name,) = edge.graph_signature.inputs_to_lifted_tensor_constants.values()
    assert edge.constants[name].item() == 2.0
    assert not [n for n in edge.graph.nodes if n.op == "get_attr"]


def test_channels_last_becomes_dim_order_copy():
    gm = to_edge(torch.export.export(ChannelsLast(), (torch.randn(1, 3, 4, 4),))).exported_program().graph_module
    to_dim_order = exir_ops.edge.dim_order_ops._to_dim_order_copy.default
    orders = [n.kwargs["dim_order"] for n in gm.graph.nodes if n.target == to_dim_order]
    assert [0, 2, 3, 1] in orders


def test_skip_dim_order_keeps_memory_format_ops():
    config = EdgeCompileConfig(_skip_dim_order=True)
    model, args = MODELS["mixed_types"]
    edge = to_edge(torch.export.export(model, args), compile_config=config).exported_program()
    names = set(_op_counts(edge.graph_module))
    assert {"aten::_to_copy", "aten::clone"} <= names
    assert not any(n.startswith("dim_order_ops") for n in names)
    torch.testing.assert_close(edge.module()(*args), model(*args))


class HardSigmoid(nn.Module):
    def forward(self, x):
        return F.hardsigmoid(x)


def test_hardsigmoid_is_decomposed_unless_preserved():
    x = torch.randn(8)
    ep = torch.export.export(HardSigmoid(), (x,))
    edge = to_edge(ep).exported_program()
    assert "aten::hardsigmoid" not in _op_counts(edge.graph_module)
    torch.testing.assert_close(edge.module()(x), F.hardsigmoid(x), atol=1e-6, rtol=1e-6)

    keep = EdgeCompileConfig(preserve_ops=[torch.ops.aten.hardsigmoid.default])
    kept = to_edge(torch.export.export(HardSigmoid(), (x,)), compile_config=keep).exported_program()
    assert _op_counts(kept.graph_module) == {"aten::hardsigmoid": 1}


def test_mutable_buffer_is_written_back():
    edge = to_edge(torch.export.export(Counter(), (torch.ones(3),))).exported_program()
    assert list(edge.graph_signature.buffers_to_mutate.values()) == ["buf"]
    module = edge.module()
    torch.testing.assert_close(module(torch.ones(3)), torch.ones(3))
    torch.testing.assert_close(module(torch.ones(3)), torch.full((3,), 2.0))


def test_cond_branches_are_lowered_and_run():
    edge = to_edge(torch.export.export(Cond(), (torch.randn(4),))).exported_program()
    (cond,) = [n for n in edge.graph.nodes if n.target is torch.ops.higher_order.cond]
    assert [a.op for a in cond.args[1:3]] == ["get_attr", "get_attr"]
    for x in (torch.ones(4), -torch.ones(4)):
        torch.testing.assert_close(edge.module()(x), Cond()(x))


def test_dynamic_shapes_survive():
    batch = torch.export.Dim("batch", min=1, max=16)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    ep = torch.export.export(model, (torch.randn(2, 4),), dynamic_shapes=({0: batch},))
    edge = to_edge(ep).exported_program()
    assert edge.range_constraints
    for n in (1, 7):
        x = torch.randn(n, 4)
        torch.testing.assert_close(edge.module()(x), model(x))


def test_multi_method_and_constant_methods():
    encode = torch.export.export(nn.Linear(10, 5), (torch.randn(1, 10),))
    decode = torch.export.export(nn.Linear(5, 10), (torch.randn(1, 5),))
    manager = to_edge({"encode": encode, "decode": decode}, constant_methods={"get_vocab_size": 32000})
    assert manager.methods == {"encode", "decode"}
    assert manager.config_methods == {"get_vocab_size"}
    assert manager.exported_program("decode").module()(torch.randn(1, 5)).shape == (1, 10)
    with pytest.raises(KeyError, match="forward"):
        manager.exported_program()


def _plain_function(x):
    return x * 2


@pytest.mark.parametrize("kind", ["call_function", "call_method"])
def test_non_operator_node_is_rejected_with_its_name(kind):
    ep = torch.export.export(nn.ReLU(), (torch.randn(3),))
    graph = ep.graph_module.graph
    relu = next(n for n in graph.nodes if n.op == "call_function")
    with graph.inserting_after(relu):
        if kind == "call_function":
            bad = graph.call_function(_plain_function, (relu,))
        else:
            bad = graph.call_method("neg", (relu,))
    relu.replace_all_uses_with(bad, delete_user_cb=lambda user: user is not bad)
    ep.graph_module.recompile()
    with pytest.raises(SpecViolationError, match=bad.name):
        to_edge(ep)


def test_non_core_op_is_rejected_unless_excepted():
    from edgetorch.exir.program import lower_to_edge

    x = torch.randn(8)
    keep = [torch.ops.aten.hardsigmoid.default]
    lowered = lower_to_edge(torch.export.export(HardSigmoid(), (x,)), ops_to_not_decompose=keep)
    assert _op_counts(lowered.graph_module) == {"aten::hardsigmoid": 1}
    from edgetorch.exir.verification import verify_edge_graph

    with pytest.raises(SpecViolationError, match="hardsigmoid.*Core ATen"):
        verify_edge_graph(lowered.graph_module)


def test_transform_takes_torch_s_pass_manager_and_none_lists():
    from torch.fx.passes.infra.pass_base import PassBase, PassResult
    from torch.fx.passes.infra.pass_manager import PassManager as TorchPassManager

    from edgetorch.exir import EdgeCompileConfig
    from edgetorch.exir.dialects._ops import ops

    class AddToMul(PassBase):
        def call(self, graph_module):
            for node in graph_module.graph.nodes:
                if node.target == ops.edge.aten.add.Tensor:
                    node.target = ops.edge.aten.mul.Tensor
            return PassResult(graph_module, True)

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    config = EdgeCompileConfig(_core_aten_ops_exception_list=None)  # None, as ExecuTorch's callers pass it
    manager = to_edge(torch.export.export(Add(), (torch.ones(2), torch.ones(2))), compile_config=config)
    pm = TorchPassManager()
    pm.add_pass(AddToMul())
    x, y = torch.full((2,), 2.0), torch.full((2,), 3.0)
    assert torch.equal(manager.transform(pm).exported_program().module()(x, y), x * y)


def test_decompose_walks_the_dispatchers_composite_ops_once_and_sees_an_op_defined_since(monkeypatch):
    """torch's run_decompositions walks the dispatcher's CompositeImplicitAutograd ops once per op namespace;
    to_edge walks them once a call (so an op registered since the last call is seen) and puts torch's
    function, and the annotation its kernel registrations use, back afterwards."""
    import importlib

    import torch._export.utils as export_utils

    decompose_module = importlib.import_module("edgetorch.exir.passes.decompose")  # the package exports a function
    walks = []
    original = decompose_module._MATERIALIZE_CIA
    counted = lambda: walks.append(1) or original()  # noqa: E731
    monkeypatch.setattr(decompose_module, "_MATERIALIZE_CIA", counted)
    monkeypatch.setattr(export_utils, "_materialize_cpp_cia_ops", counted)  # as at import; torch's again after
    lib = torch.library.Library("et_test_cia", "DEF")  # noqa: TOR901
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CompositeImplicitAutograd")

    class Twice(nn.Module):
        def forward(self, x):
            return torch.ops.et_test_cia.twice(x) + 1

    program = torch.export.export(Twice(), (torch.randn(3),))
    edge = to_edge(program).exported_program()
    targets = {str(n.target) for n in edge.graph.nodes if n.op == "call_function"}
    assert not any("twice" in t for t in targets), targets
    assert any("mul" in t for t in targets), targets
    assert walks == [1]
    assert export_utils._materialize_cpp_cia_ops is counted
    assert torch._ops.Callable is collections.abc.Callable  # the annotation torch registers kernels with, back
    x = torch.randn(3)
    assert torch.equal(edge.module()(x), x * 2 + 1)


def test_the_stand_in_for_torchs_callable_answers_isinstance_as_it_does():
    """Inside trimmed_decompositions torch._ops' ``Callable`` is a stand-in whose subscription builds nothing;
    torch checks a Python kernel with ``isinstance(handler, Callable)``, which must answer as before."""
    import importlib

    decompose_module = importlib.import_module("edgetorch.exir.passes.decompose")
    with decompose_module.trimmed_decompositions():
        stand_in = torch._ops.Callable
        assert stand_in is not collections.abc.Callable
        for thing in (len, lambda: 0, torch.add, nn.ReLU(), 3, "text", None):
            assert isinstance(thing, stand_in) == isinstance(thing, collections.abc.Callable), thing
        assert issubclass(nn.ReLU, stand_in) and not issubclass(int, stand_in)
        assert stand_in[[int], int] is typing.Callable
    assert torch._ops.Callable is collections.abc.Callable
