"""Load-time fusions of the XNNPACK runtime half: a float clamp (ReLU, ReLU6, hardtanh) that is the only
reader of a layer's output moves into the layer (and, in the fast tier, into the layer's last pass with its
bias), with the same float32 results in both tiers and eager's within float rounding; and zero padding along
height and width (TensorFlow-style "same" padding written as ``F.pad``) folds into the convolution reading it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime import XnnpackBackend
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime, policy


class Layers(nn.Module):
    """Convolutions with batch norms (which edgetorch's lowering folds, keeping the activation as a clamp
    node): 1x1, 3x3, grouped and depthwise, then a linear layer and an add with their clamps."""

    def __init__(self):
        super().__init__()
        self.pointwise = nn.Sequential(nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8), nn.ReLU6())
        self.conv = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.grouped = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1, groups=2), nn.BatchNorm2d(8), nn.Hardtanh(-0.5, 0.5))
        self.depthwise = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU6())
        self.linear = nn.Linear(8, 5)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = self.depthwise(self.grouped(self.conv(self.pointwise(x))))
        y = torch.relu(y + 0.25)
        return torch.relu(self.linear(y.mean((2, 3))))


class SharedOutput(nn.Module):
    """A clamp whose input has another reader: the input must stay unclamped."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y), y * 2


def run(module: nn.Module, x: torch.Tensor, tier: bool, monkeypatch, set_policy) -> tuple[list, list]:
    """The outputs of ``module`` lowered to XNNPACK and run by edgetorch with the fast tier on or off, and
    the node types each delegate compiled (after the fusions)."""
    set_policy(compiled=tier)
    pte = to_edge_transform_and_lower(torch.export.export(module.eval(), (x,)), partitioner=[XnnpackPartitioner()])
    delegates, init = [], XnnpackBackend.init

    def capture(self, *args):
        handle = init(self, *args)
        delegates.append(handle)
        return handle

    monkeypatch.setattr(XnnpackBackend, "init", capture)
    method = Runtime.get().load_program(pte.to_executorch().buffer).load_method("forward")
    outs = method.execute([x.numpy()])
    assert delegates, "the model was not delegated to XNNPACK"
    return [np.array(o) for o in outs], delegates


@pytest.mark.parametrize(
    "tier", [False, pytest.param(True, marks=pytest.mark.skipif(not policy.compiled_tier(), reason="numba"))]
)
def test_clamps_fuse_into_their_layers(tier, monkeypatch, set_policy):
    torch.manual_seed(0)
    module, x = Layers().eval(), torch.randn(2, 4, 9, 7)
    outs, delegates = run(module, x, tier, monkeypatch, set_policy)
    with torch.no_grad():
        np.testing.assert_allclose(outs[0], module(x).numpy(), rtol=1e-5, atol=1e-6)
    (delegate,) = delegates
    clamps = [n for n in delegate.xnodes if isinstance(n.xnode_union, xs.XNNClamp)]
    assert len(clamps) >= 4, "the lowering no longer keeps clamp nodes; this test needs a new subject"
    # Every clamp moved into its producer: the plan holds no step of a clamp node.
    plan = next(iter(delegate.schedules.values()))
    starts = [0, *plan.ends[:-1]]
    for node, start, end in zip(delegate.xnodes, starts, plan.ends):
        if isinstance(node.xnode_union, xs.XNNClamp):
            assert start == end, "a clamp that reads only a layer's output still runs as a pass of its own"


@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
def test_both_tiers_give_the_same_floats_within_rounding(monkeypatch, set_policy):
    # The fast tier's packed GEMM sums each output's products in its own order (as two BLAS libraries do); the
    # passes around it (bias, clamp, depthwise) compute what the NumPy tier computes.
    torch.manual_seed(1)
    module, x = Layers().eval(), torch.randn(1, 4, 12, 10)
    compiled, _ = run(module, x, True, monkeypatch, set_policy)
    numpy_tier, _ = run(module, x, False, monkeypatch, set_policy)
    np.testing.assert_allclose(compiled[0], numpy_tier[0], rtol=1e-6, atol=1e-6)


def test_a_clamp_with_a_shared_input_leaves_the_input_alone(monkeypatch, set_policy):
    torch.manual_seed(2)
    module, x = SharedOutput().eval(), torch.randn(1, 3, 5, 5)
    outs, _ = run(module, x, policy.compiled_tier(), monkeypatch, set_policy)
    with torch.no_grad():
        for got, want in zip(outs, module(x)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    assert (outs[1] < 0).any(), "the unclamped output has no negative entries to tell the cases apart"


class SamePadded(nn.Module):
    """EfficientNet-Lite's strided blocks: explicit asymmetric zero pads before a depthwise and a regular
    convolution; then a pad that may not fold (non-zero value) and one whose output has two readers."""

    def __init__(self):
        super().__init__()
        self.depthwise = nn.Conv2d(6, 6, 3, stride=2, groups=6)
        self.conv = nn.Conv2d(6, 8, 3, stride=2, padding=1)
        self.last = nn.Conv2d(8, 8, 3, groups=8)

    def forward(self, x):
        y = torch.relu(self.depthwise(F.pad(x, (0, 1, 0, 1))))
        y = self.conv(F.pad(y, (1, 2, 0, 1)))
        shared = F.pad(y, (1, 1, 1, 1))
        return self.last(F.pad(y, (1, 1, 1, 1), value=0.5)) + self.last(shared), shared


def _pads(delegate) -> int:
    return sum(isinstance(n.xnode_union, xs.XNNStaticConstantPad) for n in delegate.xnodes)


@pytest.mark.parametrize(
    "tier", [False, pytest.param(True, marks=pytest.mark.skipif(not policy.compiled_tier(), reason="numba"))]
)
def test_zero_pads_fold_into_the_convolution_reading_them(tier, monkeypatch, set_policy):
    torch.manual_seed(3)
    module, x = SamePadded().eval(), torch.randn(2, 6, 11, 9)
    lowered = to_edge_transform_and_lower(torch.export.export(module, (x,)), partitioner=[XnnpackPartitioner()])
    blob_pads = sum(
        isinstance(n.xnode_union, xs.XNNStaticConstantPad)
        for d in [lowered]
        for n in _blob_nodes(d.to_executorch().buffer)
    )
    assert blob_pads == 4, "the lowering no longer writes the pads as nodes; this test needs a new subject"
    outs, delegates = run(module, x, tier, monkeypatch, set_policy)
    with torch.no_grad():
        for got, want in zip(outs, module(x)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)
    # The two zero pads with one convolution reading them are gone; the 0.5 pad and the shared one stay.
    assert sum(_pads(d) for d in delegates) == 2


def _blob_nodes(pte: bytes) -> list:
    from edgetorch.backends.xnnpack.blob import parse_blob
    from edgetorch.format.pte import load_pte

    loaded = load_pte(pte)
    nodes = []
    for d in loaded.program.execution_plan[0].delegates:
        ref = d.processed
        data = loaded.program.backend_delegate_data[ref.index].data if ref.location == 0 else loaded.segment(ref.index)
        nodes += parse_blob(data).graph.xnodes
    return nodes


class RmsNorms(nn.Module):
    """Two RMSNorms as edgetorch's language models write them (extension/llm/model/transformer.py, the mean of
    squares as a linear layer so that XNNPACK takes the whole norm), around a linear layer; the second norm's
    row means are also an output, so its chain may not fuse."""

    def __init__(self):
        super().__init__()
        self.w1 = nn.Parameter(torch.rand(16) + 0.5)
        self.w2 = nn.Parameter(torch.rand(16) + 0.5)
        self.linear = nn.Linear(16, 16)
        self.register_buffer("mean_row", torch.full((1, 16), 1 / 16))

    def forward(self, x):
        y = self.w1 * (x * torch.rsqrt(F.linear(x.pow(2), self.mean_row) + 1e-5))
        y = self.linear(y)
        means = F.linear(y.pow(2), self.mean_row)
        return self.w2 * (y * torch.rsqrt(means + 1e-6)), means


def _absorbed(delegates, kind: type = xs.XNNSquare) -> list[bool]:
    """For each node of ``kind`` in the delegates, in order: whether it runs no step of its own (its chain was fused
    into a later node)."""
    found = []
    for delegate in delegates:
        plan = next(iter(delegate.schedules.values()))
        starts = [0, *plan.ends[:-1]]
        found += [
            start == end
            for node, start, end in zip(delegate.xnodes, starts, plan.ends)
            if isinstance(node.xnode_union, kind)
        ]
    return found


@pytest.mark.parametrize(
    "tier", [False, pytest.param(True, marks=pytest.mark.skipif(not policy.compiled_tier(), reason="numba"))]
)
@pytest.mark.parametrize("rows", [1, 5])
def test_an_rms_norm_chain_runs_as_one_step(tier, rows, monkeypatch, set_policy):
    torch.manual_seed(3)
    module, x = RmsNorms().eval(), torch.randn(rows, 16) * 3
    outs, delegates = run(module, x, tier, monkeypatch, set_policy)
    with torch.no_grad():
        for got, want in zip(outs, module(x)):
            np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=1e-6)
    assert _absorbed(delegates) == [True, False], "the first norm fuses; the one whose mean is an output does not"


def test_an_rms_norm_of_a_zero_row_gives_eagers_values(monkeypatch, set_policy):
    """A row of zeros: mean 0, so the scale is 1 / sqrt(eps); and a row of huge values whose squares overflow."""
    module = RmsNorms().eval()
    x = torch.zeros(3, 16)
    x[1] = 3e19
    outs, _ = run(module, x, policy.compiled_tier(), monkeypatch, set_policy)
    with torch.no_grad():
        want = module(x)[0].numpy()
    np.testing.assert_allclose(outs[0], want, rtol=2e-6, atol=1e-6)


class Gates(nn.Module):
    """A SwiGLU feed-forward as edgetorch's language models write it (``silu(w1 x) * w3 x``), then a second gate
    whose SiLU is also an output, so its chain may not fuse."""

    def __init__(self):
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(8, 24), nn.Linear(8, 24), nn.Linear(24, 8)

    def forward(self, x):
        y = self.w2(F.silu(self.w1(x)) * self.w3(x))
        shared = F.silu(y)
        return shared * x, shared


@pytest.mark.parametrize(
    "tier", [False, pytest.param(True, marks=pytest.mark.skipif(not policy.compiled_tier(), reason="numba"))]
)
@pytest.mark.parametrize("rows", [1, 6])
def test_a_swiglu_gate_runs_as_one_step(tier, rows, monkeypatch, set_policy):
    torch.manual_seed(4)
    module, x = Gates().eval(), torch.randn(rows, 8) * 4
    x[0, :3] = torch.tensor([-100.0, 100.0, 0.0])  # the sigmoid's far ends and its middle
    outs, delegates = run(module, x, tier, monkeypatch, set_policy)
    with torch.no_grad():
        for got, want in zip(outs, module(x)):
            np.testing.assert_allclose(got, want.numpy(), rtol=2e-6, atol=1e-6)
    assert _absorbed(delegates, xs.XNNSigmoid) == [True, False], "the gate fuses; the SiLU that is an output does not"


def test_a_fused_norm_refuses_an_input_whose_rows_do_not_fit_its_weight(monkeypatch, set_policy):
    """The fused step checks what the nodes it replaces checked: a row of 15 values against 16 weights is an
    InvalidInputError naming the node, not a read past the weight's end."""
    from edgetorch.errors import InvalidInputError

    _, delegates = run(RmsNorms().eval(), torch.randn(2, 16), policy.compiled_tier(), monkeypatch, set_policy)
    fused = next(d for d in delegates if True in _absorbed([d]))
    args = [np.zeros((2, 15), np.float32)] + [np.zeros((2, 16), np.float32)] * (fused.graph.arg_count - 1)
    with pytest.raises(InvalidInputError, match="does not end in the weight's 16 channels"):
        fused.execute(args)
