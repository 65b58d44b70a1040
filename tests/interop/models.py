"""A model set covering every operator family the portable runtime runs; seeded random weights.

Each entry: name -> (module factory, example inputs factory, dynamic_shapes or None).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _seed(factory):
    def make():
        torch.manual_seed(0)
        return factory()

    return make


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.grouped = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
        self.up = nn.ConvTranspose2d(8, 4, 2, stride=2)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        x = F.relu6(self.bn(self.c1(x)))
        x = F.hardswish(self.dw(x))
        x = F.max_pool2d(self.grouped(x), 2, ceil_mode=True)
        x = F.avg_pool2d(x, 3, stride=1, padding=1)
        x = self.up(x)
        return self.pool(x).flatten(1)


class Conv1d(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv1d(4, 6, 3, padding=1)
        self.t = nn.ConvTranspose1d(6, 2, 4, stride=2, padding=1)

    def forward(self, x):
        return self.t(F.silu(self.c(x)))


class TransformerBlock(nn.Module):
    def __init__(self, d=32, heads=4, vocab=50):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, tokens):
        x = self.emb(tokens)
        h = self.ln1(x)
        mask = torch.triu(torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool), 1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class SDPA(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(16, 48)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, 2, 8).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(b, t, 16)


class LSTMNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True)
        self.gru = nn.GRU(16, 8, batch_first=True)

    def forward(self, x):
        y, _ = self.lstm(x)
        z, h = self.gru(y)
        return z, h


class Elementwise(nn.Module):
    def forward(self, x, y, i, j):
        a = torch.exp(x) * torch.sigmoid(y) - torch.log1p(x.abs()) / (y.abs() + 1)
        b = torch.clamp(x, -0.5, 0.5) + torch.pow(y.abs(), 1.5) + torch.rsqrt(x.abs() + 1) + torch.erf(y)
        c = torch.where(x > y, x, y) + torch.maximum(x, y).floor() + F.leaky_relu(x) + F.elu(y)
        k = (i * 3 + j) // 2 - (i % 3) + torch.bitwise_and(i, j)
        m = (i > j) & (x > 0) | ~(y < 0)
        return a, b, c, k, m, (x == y) ^ (i != j), torch.sign(y) * torch.round(x * 4)


class Reductions(nn.Module):
    def forward(self, x):
        return (
            x.sum(1), x.mean((0, 2), keepdim=True), x.amax(-1), x.amin(0), *x.max(1), x.argmax(2),
            x.var(1), torch.cumsum(x, 1), x.prod(2), x.any(1), x.softmax(-1), x.log_softmax(1),
            torch.logsumexp(x, 2),
        )  # fmt: skip


class Indexing(nn.Module):
    def forward(self, x, idx, mask):
        a = torch.gather(x, 1, idx)
        b = torch.index_select(x, 0, idx[:, 0])
        c = x.masked_fill(mask, -1.0)
        d = x[1:, ::2] + x[:-1, 1::2]
        e = x.clone()
        e[idx[:, 0]] = 5.0
        f = x[idx[:, 0], idx[:, 1]]
        g = torch.where(mask, x, torch.zeros_like(x))
        return a, b, c, d, e, f, g


class ShapeOps(nn.Module):
    def forward(self, x, y):
        a = torch.cat([x, y], 1)
        p, q = torch.split(a, [2, 4], dim=1)
        s = torch.stack([p, p * 2], 0)
        r = x.permute(1, 0).contiguous().view(-1, 2)
        e = x[:, :1].expand(3, 5) + y.repeat(1, 1)[:, :1]
        t = torch.flip(q, [0]).transpose(0, 1).unsqueeze(0).squeeze(0)
        return a, s, r, e, t, x.reshape(12), torch.tril(torch.ones(3, 3)) @ x[:, :3]


class Upsample(nn.Module):
    def forward(self, x):
        a = F.interpolate(x, scale_factor=2, mode="nearest")
        b = F.interpolate(x, size=(7, 9), mode="bilinear", align_corners=False)
        c = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return a, b, c, F.pad(x, (1, 2, 0, 1), value=0.5), F.pixel_shuffle(x[:, :4], 2)


class Creation(nn.Module):
    def forward(self, x):
        a = torch.arange(0, 10, 2, dtype=torch.float32)
        b = torch.linspace(-1, 1, 7)
        c = torch.full((2, 3), 1.5) + torch.zeros(2, 3) + torch.ones_like(x)
        h = x.to(torch.float16) * 2
        return a, b, c, h, h.to(torch.float32) + 1, x.to(torch.int32), *torch.topk(x.flatten(), 3)


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return x * self.count


class KVCache(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(8, 4))

    def forward(self, pos, val):
        self.cache.index_copy_(0, pos, val)
        return self.cache.sum(0)


class Cond(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t.sin() + 1, lambda t: t.cos() - 1, (x,))


class DynamicMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.l2(F.gelu(self.l1(x))).softmax(-1)


def _r(*shape):
    return torch.randn(*shape)


_batch = torch.export.Dim("batch", min=1, max=16)

MODELS = {
    "mlp": (MLP, lambda: (_r(4, 16),), None),
    "convnet": (ConvNet, lambda: (_r(1, 3, 32, 32),), None),
    "conv1d": (Conv1d, lambda: (_r(2, 4, 10),), None),
    "transformer": (TransformerBlock, lambda: (torch.randint(0, 50, (2, 6)),), None),
    "sdpa": (SDPA, lambda: (_r(2, 5, 16),), None),
    "lstm_gru": (LSTMNet, lambda: (_r(2, 5, 8),), None),
    "elementwise": (
        Elementwise,
        lambda: (_r(3, 4), _r(3, 4), torch.randint(-5, 5, (3, 4)), torch.randint(1, 5, (3, 4))),
        None,
    ),
    "reductions": (Reductions, lambda: (_r(3, 4, 5),), None),
    "indexing": (Indexing, lambda: (_r(4, 6), torch.tensor([[0, 1], [2, 3], [3, 0], [1, 2]]), _r(4, 6) > 0), None),
    "shape_ops": (ShapeOps, lambda: (_r(3, 4), _r(3, 2)), None),
    "upsample": (Upsample, lambda: (_r(1, 4, 3, 5),), None),
    "creation": (Creation, lambda: (_r(2, 3),), None),
    "dynamic_mlp": (DynamicMLP, lambda: (_r(4, 8),), ({0: _batch},)),
    "cond": (Cond, lambda: (_r(3),), None),
}

MODELS = {name: (_seed(f), a, d) for name, (f, a, d) in MODELS.items()}
