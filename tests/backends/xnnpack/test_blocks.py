"""Inverted residual blocks fused at load (edgetorch/backends/xnnpack/runtime/blocks.py): found in a lowered
MobileNet-style model (through the copies the fused clamps leave, with the residual add after a block), run as
one step each with the same bits as
the unfused delegate and eager's values within rounding; a block whose middle value has another reader, or whose
weights are too large, keeps its layers; off the compiled tier nothing is fused."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgetorch.backends.xnnpack.runtime import delegate as delegate_module
from edgetorch.runtime import policy
from tests.backends.xnnpack.test_fusion import run

needs_tier = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


def _bn(c):
    bn = nn.BatchNorm2d(c)
    bn.running_mean.uniform_(-0.5, 0.5)
    bn.running_var.uniform_(0.5, 2.0)
    return bn


class Block(nn.Module):
    def __init__(self, c, e, co, k, stride, shared=False):
        super().__init__()
        self.expand = nn.Sequential(nn.Conv2d(c, e, 1, bias=False), _bn(e), nn.ReLU6()) if e != c else nn.Identity()
        self.dw = nn.Sequential(nn.Conv2d(e, e, k, stride, k // 2, groups=e, bias=False), _bn(e), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(e, co, 1, bias=False), _bn(co))
        self.residual, self.shared = stride == 1 and c == co, shared

    def forward(self, x):
        mid = self.dw(self.expand(x))
        y = self.project(mid)
        y = x + y if self.residual else y
        return (y, mid.mean()) if self.shared else y


class Net(nn.Module):
    """A stem, four blocks (one that does not expand, a residual one, stride 2 with a 5x5 window, a large last
    one), a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), _bn(8), nn.ReLU6())
        self.blocks = nn.Sequential(
            Block(8, 8, 8, 3, 1), Block(8, 48, 8, 3, 1), Block(8, 48, 16, 5, 2), Block(16, 960, 160, 3, 1)
        )
        self.head = nn.Linear(160, 10)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x)).mean((2, 3)))


def _load(module, x, fuse, monkeypatch, set_policy, tier=True):
    """test_fusion's ``run`` (outputs and delegates), with the block fusion turned off when not ``fuse``."""
    with monkeypatch.context() as patch:
        if not fuse:
            patch.setattr(delegate_module, "fuse_blocks", lambda g, nodes, reads: nodes)
        return run(module, x, tier, patch, set_policy)


@needs_tier
@pytest.mark.parametrize("batch", [1, 2])
def test_blocks_fuse_with_the_bits_of_their_layers(batch, monkeypatch, set_policy, tuned):
    """With an empty tuning cache, so that the layers' kernels are measured while the block is planned."""
    torch.manual_seed(0)
    module, x = Net().eval(), torch.randn(batch, 3, 30, 26)
    fused, (delegate,) = _load(module, x, True, monkeypatch, set_policy)
    fused_nodes = [n.xnode_union for n in delegate.compiled_nodes if type(n.xnode_union).__name__ == "InvertedResidual"]
    assert len(fused_nodes) == 3  # the 16 -> 960 -> 160 block's weights are too large
    assert [n.residual for n in fused_nodes] == [True, True, False]  # the adds after the stride-1 blocks
    layers, _ = _load(module, x, False, monkeypatch, set_policy)
    np.testing.assert_array_equal(fused[0], layers[0])
    with torch.no_grad():
        np.testing.assert_allclose(fused[0], module(x).numpy(), rtol=1e-4, atol=1e-5)


@needs_tier
def test_a_middle_value_with_another_reader_keeps_the_layers(monkeypatch, set_policy):
    torch.manual_seed(1)
    module, x = Block(8, 32, 8, 3, 1, shared=True).eval(), torch.randn(1, 8, 12, 12)
    outs, (delegate,) = _load(module, x, True, monkeypatch, set_policy)
    assert not any(type(n.xnode_union).__name__ == "InvertedResidual" for n in delegate.compiled_nodes)
    with torch.no_grad():
        want = module(x)
    np.testing.assert_allclose(outs[0], want[0].numpy(), rtol=1e-4, atol=1e-5)


def test_nothing_fuses_off_the_tier(monkeypatch, set_policy):
    torch.manual_seed(2)
    module, x = Net().eval(), torch.randn(1, 3, 18, 18)
    outs, (delegate,) = _load(module, x, True, monkeypatch, set_policy, tier=False)
    assert not any(type(n.xnode_union).__name__ == "InvertedResidual" for n in delegate.compiled_nodes)
    with torch.no_grad():
        np.testing.assert_allclose(outs[0], module(x).numpy(), rtol=1e-4, atol=1e-5)


class Chain(nn.Module):
    """1x1, depthwise, 1x1, depthwise, 1x1: the middle 1x1 layer could end the first block or begin a second."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(8, 24, 1), nn.Conv2d(24, 16, 1), nn.Conv2d(16, 8, 1)
        self.d1, self.d2 = nn.Conv2d(24, 24, 3, 1, 1, groups=24), nn.Conv2d(16, 16, 3, 2, 1, groups=16)

    def forward(self, x):
        return self.c(self.d2(self.b(self.d1(self.a(x)))))


@needs_tier
def test_a_layer_ends_one_block_only(monkeypatch, set_policy):
    """The middle 1x1 layer ends the first block; the second depthwise layer and the last 1x1 make a block
    without an expanding layer that reads the first block's output."""
    torch.manual_seed(3)
    module, x = Chain().eval(), torch.randn(1, 8, 11, 9)
    fused, (delegate,) = _load(module, x, True, monkeypatch, set_policy)
    kinds = [type(n.xnode_union).__name__ for n in delegate.compiled_nodes]
    assert kinds.count("InvertedResidual") == 2, kinds
    layers, _ = _load(module, x, False, monkeypatch, set_policy)
    np.testing.assert_array_equal(fused[0], layers[0])
    with torch.no_grad():
        np.testing.assert_allclose(fused[0], module(x).numpy(), rtol=1e-4, atol=1e-5)
