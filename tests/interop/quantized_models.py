"""Quantized models shared by the interop and XNNPACK quantization tests and bench/quant.py.

``quantized(name, scheme)`` returns the float model, example inputs and the quantized
``torch.export`` program: PT2E with our ``XNNPACKQuantizer`` (``static``, ``dynamic``, with
per-channel weights; ``static_per_tensor``, one scale per weight tensor) or torchao's
``quantize_`` (``8da4w``, ``8da8w``, ``embedding4``, ``embedding8``).
"""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchao.quantization.granularity import PerAxis, PerGroup
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, IntxWeightOnlyConfig, quantize_

from edgetorch.backends.transforms.duplicate_dynamic_quant_chain import DuplicateDynamicQuantChainPass
from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config


class MLP(nn.Module):
    def __init__(self, d_in: int = 128, hidden: int = 128, d_out: int = 32):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(d_in, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, d_out)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.c1, self.bn1 = nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width)
        self.c2 = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(width, width, 1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.c1(x)))
        x = F.relu(self.c2(x))
        x = x + self.c3(x)
        return self.fc(self.pool(x).flatten(1))


class ResBlock(nn.Module):
    """A residual block whose add carries the ReLU (XNNPACK fuses it into the quantized add)."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, width, 3, padding=1), nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x):
        y = F.relu(self.c1(x))
        return F.relu(self.c2(y) + y)


class TokenMLP(nn.Module):
    def __init__(self, vocab: int = 100, dim: int = 64):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.fc = nn.Linear(dim, dim)

    def forward(self, idx):
        return self.fc(self.emb(idx))


class QuantizedOps(nn.Module):
    """The ops ExecuTorch's XNNPACK partitioner takes in static int8 besides linear and conv (hardtanh, max
    pooling, mul, cat, mean), a depthwise conv, and average pooling, which runs in float between converts."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.c1 = nn.Conv2d(3, width, 3, padding=1)
        self.c2 = nn.Conv2d(width, width, 3, padding=1, groups=width)

    def forward(self, x):
        a = F.max_pool2d(F.hardtanh(self.c1(x)), 2)
        b = F.avg_pool2d(self.c2(a), 2)
        c = F.relu(b * F.avg_pool2d(a, 2))
        return F.adaptive_avg_pool2d(torch.cat([c, b], 1), 1)


MODELS = {
    "mlp": (MLP, lambda: (torch.randn(8, 128),)),
    "cnn": (CNN, lambda: (torch.randn(2, 3, 16, 16),)),
    "tokens": (TokenMLP, lambda: (torch.randint(0, 100, (2, 7)),)),
    "ops": (QuantizedOps, lambda: (torch.randn(1, 3, 16, 16),)),
    "res": (ResBlock, lambda: (torch.randn(1, 3, 8, 8),)),
    # bench/quant.py sizes: a GEMM-bound MLP and a CNN on a 64x64 image.
    "mlp_large": (lambda: MLP(512, 1024, 512), lambda: (torch.randn(32, 512),)),
    "cnn_large": (lambda: CNN(32), lambda: (torch.randn(1, 3, 64, 64),)),
}

TORCHAO_CONFIGS = {
    "8da4w": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)),
    "8da4w_g128": lambda: Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(128)
    ),
    "8da8w": lambda: Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0)),
    "embedding8": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0)),
    "embedding4": lambda: IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32)),
}


def float_model(name: str) -> tuple[nn.Module, tuple]:
    factory, inputs = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    torch.manual_seed(1)
    return model, inputs()


def quantized(
    name: str, scheme: str, quantizer_cls=XNNPACKQuantizer, config_fn=get_symmetric_quantization_config, fold=True
):
    """(float model, inputs, quantized ExportedProgram) for model ``name`` under ``scheme``.

    ``fold=False`` keeps dynamic-quantization weights in float with a quantize op
    (the nanoGPT guide's ``convert_pt2e(m, fold_quantize=False)``) and splits shared
    dynamic chains with ``DuplicateDynamicQuantChainPass``.
    """
    model, args = float_model(name)
    if scheme in TORCHAO_CONFIGS:
        q = copy.deepcopy(model)
        embedding = scheme.startswith("embedding")
        quantize_(q, TORCHAO_CONFIGS[scheme](), (lambda m, fqn: isinstance(m, nn.Embedding)) if embedding else None)
        return model, args, torch.export.export(q, args)
    dynamic = scheme == "dynamic"
    gm = torch.export.export(copy.deepcopy(model), args).module()
    per_channel = scheme != "static_per_tensor"
    quantizer = quantizer_cls().set_global(config_fn(is_per_channel=per_channel, is_dynamic=dynamic))
    prepared = prepare_pt2e(gm, quantizer)
    torch.manual_seed(2)
    for _ in range(4):  # calibration: the example inputs and a few more of the same distribution
        prepared(*args)
        if args[0].is_floating_point():
            prepared(torch.randn_like(args[0]))
    converted = convert_pt2e(prepared, fold_quantize=fold)
    if dynamic and not fold:
        DuplicateDynamicQuantChainPass()(converted)
    return model, args, torch.export.export(converted, args)


def sqnr(reference, test) -> float:
    """Signal-to-quantization-noise ratio in dB (as torchao's ``compute_error``)."""
    reference, test = torch.as_tensor(reference, dtype=torch.float64), torch.as_tensor(test, dtype=torch.float64)
    noise = torch.linalg.norm(reference - test)
    return float("inf") if noise == 0 else float(20 * torch.log10(torch.linalg.norm(reference) / noise))


def output_step(ep: torch.export.ExportedProgram, reference) -> float:
    """One quantization step of the program's output: the scale of its last dequantize, or of int8 over its range."""
    scale = None
    for node in ep.graph.nodes:
        if node.op == "call_function" and "dequantize" in str(node.target) and isinstance(node.args[1], float):
            scale = node.args[1]
    reference = torch.as_tensor(reference)
    range_step = float(reference.max() - reference.min()) / 255
    return max(scale or 0.0, range_step)
