"""XNNPACKQuantizer against ExecuTorch's: the same converted graph (ops, order, qparams) for each model and config."""

from __future__ import annotations

import copy
import operator
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import GraphModule, Node
from torchao.quantization.pt2e import move_exported_model_to_eval
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

from edgetorch.backends.transforms.duplicate_dynamic_quant_chain import DuplicateDynamicQuantChainPass
from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

executorch_quantizer = pytest.importorskip("executorch.backends.xnnpack.quantizer.xnnpack_quantizer")


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 8)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = F.relu(self.bn1(self.c1(x)))
        x = F.max_pool2d(x, 2)
        x = self.bn2(self.c2(x))
        x = F.hardtanh(self.dw(x), 0.0, 6.0)
        return self.fc(self.pool(x).flatten(1))


class AddCat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(4, 4, 1), nn.Conv2d(4, 4, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)

    def forward(self, x, y):
        s = F.relu(self.a(x) + self.b(y))
        m = (s * y) * 0.5 + 1.0
        c = torch.cat([s, F.relu(m)], dim=1)
        return self.up(c).mean(dim=(-1, -2))


class ConvBN(nn.Module):
    """conv+bn+relu and a bias-free conv+bn, as QAT keeps them (PTQ folds the batch norm first)."""

    def __init__(self):
        super().__init__()
        self.c1, self.bn1 = nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 4, 3, bias=False), nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn2(self.c2(F.relu(self.bn1(self.c1(x)))))


class Attention(nn.Module):
    """Three linears reading one input: the dynamic chain the duplicate pass splits."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 16, bias=False)

    def forward(self, x):
        return torch.softmax(self.q(x) @ self.k(x).transpose(-1, -2), -1) @ self.v(x)


MODELS = {
    "mlp": (MLP, lambda: (torch.randn(4, 16),)),
    "cnn": (CNN, lambda: (torch.randn(2, 3, 16, 16),)),
    "add_cat": (AddCat, lambda: (torch.randn(1, 4, 8, 8), torch.randn(1, 4, 8, 8))),
    "attention": (Attention, lambda: (torch.randn(2, 5, 16),)),
    "conv_bn": (ConvBN, lambda: (torch.randn(2, 3, 8, 8),)),
}

CONFIGS = {
    "static_per_tensor": {},
    "static_per_channel": {"is_per_channel": True},
    "dynamic_per_channel": {"is_per_channel": True, "is_dynamic": True},
    "dynamic_per_tensor": {"is_dynamic": True},
}
QAT_CONFIGS = {
    "qat_per_channel": {"is_per_channel": True, "is_qat": True},
    "qat": {"is_qat": True},
}
# prepare_qat_pt2e spends about a minute per quantizer fusing conv+bn (torchao exports its patterns),
# so the conv+bn QAT comparison runs only when asked for.
SLOW = pytest.mark.skipif(not os.environ.get("EDGETORCH_SLOW"), reason="set EDGETORCH_SLOW=1 (about 2 min)")
# Each model with the configs that exercise its patterns (every pairing passes; this keeps the file fast).
CASES = [
    ("mlp", "static_per_tensor"),
    ("mlp", "dynamic_per_channel"),
    ("mlp", "qat"),
    ("cnn", "static_per_channel"),
    ("cnn", "dynamic_per_tensor"),
    ("add_cat", "static_per_tensor"),
    ("attention", "dynamic_per_channel"),
    ("attention", "qat_per_channel"),
    pytest.param("conv_bn", "qat_per_channel", marks=SLOW),
]
CONFIGS.update(QAT_CONFIGS)


def _quantize(make_quantizer, make_config, model_name: str, options: dict, fold: bool = True) -> GraphModule:
    factory, inputs = MODELS[model_name]
    torch.manual_seed(0)
    model = factory()
    qat = options.get("is_qat", False)
    model.train(qat)
    args = inputs()
    gm = torch.export.export(model, args).module()
    quantizer = make_quantizer().set_global(make_config(**options))
    prepared = (prepare_qat_pt2e if qat else prepare_pt2e)(gm, quantizer)
    for _ in range(2):
        prepared(*args)
    if qat:
        move_exported_model_to_eval(prepared)
    return convert_pt2e(prepared, fold_quantize=fold)


def _signature(gm: GraphModule, by_position: bool = True) -> list:
    """The graph as comparable data: every node's op, target and arguments, constants by value.

    Arguments name the node they read by position, or (``by_position=False``, for graphs
    whose node order may differ) by its target.
    """
    index = {n: i for i, n in enumerate(gm.graph.nodes)}

    def arg(a):
        if isinstance(a, Node):
            return ("node", index[a] if by_position else str(a.target))
        if isinstance(a, (list, tuple)):
            return tuple(arg(x) for x in a)
        return a

    rows = []
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            value = operator.attrgetter(n.target)(gm)
            rows.append(("get_attr", value.dtype, tuple(value.shape), value.detach().flatten().tolist()))
        elif n.op == "call_module":
            continue
        else:
            rows.append((n.op, str(n.target), arg(n.args), arg(dict(n.kwargs))))
    return rows


def _quantized_ops(gm: GraphModule) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if "quantized_decomposed" in str(n.target)]


@pytest.mark.parametrize(("model", "config"), CASES)
def test_same_graph_as_executorch(model: str, config: str):
    ours = _quantize(XNNPACKQuantizer, get_symmetric_quantization_config, model, CONFIGS[config])
    theirs = _quantize(
        executorch_quantizer.XNNPACKQuantizer,
        executorch_quantizer.get_symmetric_quantization_config,
        model,
        CONFIGS[config],
    )
    assert _quantized_ops(ours), "nothing was quantized"
    assert _signature(ours) == _signature(theirs)
    args = MODELS[model][1]()
    torch.testing.assert_close(ours(*args), theirs(*args), rtol=0, atol=0)


def test_duplicate_dynamic_quant_chain_matches_executorch():
    from executorch.backends.transforms.duplicate_dynamic_quant_chain import (
        DuplicateDynamicQuantChainPass as TheirPass,
    )

    options = CONFIGS["dynamic_per_channel"]
    ours = _quantize(XNNPACKQuantizer, get_symmetric_quantization_config, "attention", options, fold=False)
    theirs = copy.deepcopy(ours)
    chooses = [n for n in ours.graph.nodes if n.target == torch.ops.quantized_decomposed.choose_qparams.tensor]
    assert len(chooses) == 1
    DuplicateDynamicQuantChainPass()(ours)
    TheirPass()(theirs)
    chooses = [n for n in ours.graph.nodes if n.target == torch.ops.quantized_decomposed.choose_qparams.tensor]
    assert len(chooses) == 3 and all(len(n.users) == 2 for n in chooses)
    assert sorted(map(str, _signature(ours, False))) == sorted(map(str, _signature(theirs, False)))
    args = MODELS["attention"][1]()
    torch.testing.assert_close(ours(*args), theirs(*args), rtol=0, atol=0)


def test_config_fields():
    cfg = get_symmetric_quantization_config()
    assert (cfg.weight.quant_min, cfg.weight.quant_max, cfg.weight.qscheme) == (-127, 127, torch.per_tensor_symmetric)
    act = cfg.input_activation
    assert (act.quant_min, act.quant_max, act.qscheme, act.dtype) == (-128, 127, torch.per_tensor_affine, torch.int8)
    assert get_symmetric_quantization_config(is_per_channel=True).weight.qscheme == torch.per_channel_symmetric
    dynamic = get_symmetric_quantization_config(is_dynamic=True)
    assert dynamic.input_activation.is_dynamic and dynamic.output_activation is None
    assert get_symmetric_quantization_config() is cfg  # cached, as ExecuTorch's is


def _linear_modes(gm: GraphModule) -> dict[str, str]:
    """For each linear in a converted graph, whether its input is quantized statically, dynamically or not at all."""
    modes = {}
    for n in gm.graph.nodes:
        if n.target is torch.ops.aten.linear.default:
            src = n.args[0]
            if "dequantize" not in str(src.target):
                modes[n.name] = "float"
            else:
                modes[n.name] = "dynamic" if isinstance(src.args[1], Node) else "static"
    return modes


def test_per_module_configs():
    static = get_symmetric_quantization_config()
    dynamic = get_symmetric_quantization_config(is_dynamic=True)
    q = XNNPACKQuantizer()
    assert q.set_global(static) is q
    gm = _quantize(lambda: XNNPACKQuantizer().set_module_name("fc2", dynamic), lambda: static, "mlp", {})
    assert list(_linear_modes(gm).values()) == ["static", "dynamic", "static"]

    def only(setter, key, cfg):
        def make():
            quantizer = XNNPACKQuantizer()
            getattr(quantizer, setter)(key, cfg)
            return quantizer

        return make

    gm = _quantize(only("set_module_name", "fc3", dynamic), lambda: None, "mlp", {})
    assert list(_linear_modes(gm).values()) == ["float", "float", "dynamic"]
    gm = _quantize(only("set_module_type", nn.Linear, static), lambda: None, "mlp", {})
    assert set(_linear_modes(gm).values()) == {"static"}
    gm = _quantize(only("set_object_type", nn.Linear, dynamic), lambda: None, "mlp", {})
    assert set(_linear_modes(gm).values()) == {"dynamic"}
    gm = _quantize(only("set_operator_type", torch.ops.aten.linear, dynamic), lambda: None, "cnn", {})
    assert set(_linear_modes(gm).values()) == {"dynamic"}
    assert not any("convolution" in t or "conv2d" in t for t in _quantized_ops(gm))
    with pytest.raises(AssertionError):
        XNNPACKQuantizer().set_module_name("x", None)
