"""The compiled passes of the quantized XNNPACK nodes (edgetorch/backends/xnnpack/qfast.py, the [fast] tier)
give the same bits as the NumPy path: kernel by kernel on rounding ties and clip bounds, and on whole
quantized programs lowered by edgetorch (static int8 with residual adds and depthwise convolutions,
dynamic int8, 8da4w) run with the tier on and off."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import qfast
from edgetorch.backends.xnnpack.runtime.quantization import dynamic_convert
from edgetorch.runtime import Runtime, policy

needs_numba = pytest.mark.skipif(
    not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])"
)


@needs_numba
def test_requantize_kernel_equals_numpy_on_ties_and_bounds():
    rng = np.random.default_rng(0)
    acc = rng.integers(-3000, 3000, (37, 11)).astype(np.float32)
    acc[0] = np.arange(-5, 6) * 2 + 1  # odd integers times 0.5: every value a rounding tie
    bias = rng.integers(-100, 100, 11).astype(np.float32)
    factor = rng.uniform(0.001, 0.2, 11).astype(np.float32)
    factor[:] = np.where(np.arange(11) % 3 == 0, np.float32(0.5), factor)
    for b in (bias, np.empty(0, np.float32)):
        lo, hi = np.float32(-128 - 3), np.float32(127 - 3)
        want = acc + b if b.size else acc.copy()
        want = np.rint(np.clip(want * factor, lo, hi))
        got = np.empty_like(acc)
        qfast.requantize()(acc, b, factor, lo, hi, got)
        np.testing.assert_array_equal(got, want)


@needs_numba
def test_dynamic_quantize_kernel_equals_numpy(monkeypatch, set_policy):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((9, 50)).astype(np.float32) * np.float32(3)
    x[1] = np.abs(x[1])  # all positive: the range widens to hold 0
    x[2] = -np.abs(x[2])
    x[3] = 0  # a flat row: scale 1
    x[4, :] = np.linspace(-1, 1, 50, dtype=np.float32)
    results = []
    for tier in (True, False):
        set_policy(compiled=tier)
        centred, q = np.empty_like(x), np.empty(x.shape, np.int8)
        scale, zp = np.empty((9, 1), np.float32), np.empty((9, 1), np.float32)
        dynamic_convert(x, centred, q, scale, zp, tier)()
        results.append((centred, q, scale, zp))
    for got, want in zip(*results):
        np.testing.assert_array_equal(got, want)


@needs_numba
def test_dynamic_convert_keeps_the_tier_its_step_was_built_with(set_policy):
    """The tier is the delegate's, given when the step is built: a step built for the compiled tier fills the
    fully connected's dequantized buffer even if the policy changes before it runs."""
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(np.float32)
    centred, scale, zp = np.empty_like(x), np.empty((4, 1), np.float32), np.empty((4, 1), np.float32)
    dequantized = np.zeros((4, 17), np.float32)
    set_policy(compiled=True)
    step = dynamic_convert(x, centred, None, scale, zp, True, dequantized)
    set_policy(compiled=False)
    step()
    np.testing.assert_array_equal(dequantized[:, :16], centred * scale)
    np.testing.assert_array_equal(dequantized[:, 16], 1)  # the bias row's multipliers, set by the same pass


def _edgetorch_pte(model: str, scheme: str) -> tuple[bytes, tuple]:
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower
    from tests.interop.quantized_models import quantized

    _, args, ep = quantized(model, scheme)
    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer, args


@needs_numba
@pytest.mark.parametrize(
    ("model", "scheme", "kernels"),
    [
        ("res", "static", {"requantize", "quantized_add"}),  # an add carrying a ReLU
        ("cnn", "static", {"requantize", "quantized_add"}),
        ("ops", "static", {"requantize"}),  # a depthwise convolution, max pooling, mul, cat
        ("mlp", "dynamic", {"dynamic_quantize"}),
        ("mlp", "8da4w", {"dynamic_quantize"}),
    ],
)
def test_quantized_programs_equal_with_and_without_the_compiled_passes(model, scheme, kernels, monkeypatch, set_policy):
    pte, args = _edgetorch_pte(model, scheme)
    inputs = [a.numpy() for a in args]
    used: set[str] = set()
    for name in ("requantize", "quantized_add", "dynamic_quantize"):
        getter = getattr(qfast, name)
        monkeypatch.setattr(qfast, name, lambda getter=getter, name=name: used.add(name) or getter())
    # The integer GEMV (qgemv.py, tested in test_qgemv.py) scales exact int32 sums: not the sgemm's bits.
    set_policy(gemv_max_rows=dict.fromkeys(policy.current().gemv_max_rows, 0))
    outputs = []
    for tier in (True, False):
        set_policy(compiled=tier)
        method = Runtime.get().load_program(pte).load_method("forward")
        outputs.append(method.execute(inputs)[0])
        if tier:
            assert kernels <= used, f"the compiled passes {kernels - used} did not run"
    np.testing.assert_array_equal(outputs[0], outputs[1])


class PatchEmbedding(torch.nn.Module):
    """A ViT's patch embedding: with dynamic int8, XNNPACK quantizes the NCHW input, then transposes it."""

    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 16, 4, stride=4)
        self.fc = torch.nn.Linear(16, 8)

    def forward(self, x):
        return self.fc(self.patch(x).flatten(2).transpose(1, 2))


def test_dynamically_quantized_patch_embedding_runs_as_on_executorch():
    """Our lowering converts the NCHW input after its transpose, as ExecuTorch does: ExecuTorch's runtime
    gave an 88% relative error on the earlier transpose-after-convert blob; both runtimes now agree."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
    from edgetorch.exir import to_edge_transform_and_lower
    from tests.oracle import run_executorch

    torch.manual_seed(0)
    model, x = PatchEmbedding().eval(), torch.randn(2, 3, 16, 16)
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    prepared = prepare_pt2e(torch.export.export(model, (x,)).module(), quantizer)
    prepared(x)
    ep = torch.export.export(convert_pt2e(prepared), (x,))
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    ours = Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0]
    theirs = np.asarray(run_executorch(pte, [x])[0])
    want = model(x).detach().numpy()
    # Float outputs of the same integer products: equal up to float32 rounding of the scales' products.
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * float(np.abs(theirs).max()))
    assert float(np.linalg.norm(want - ours) / np.linalg.norm(want)) < 0.05


@needs_numba
def test_static_int8_convolutions_never_take_winograd(monkeypatch):
    """A static int8 convolution runs the float planner on centred integers, whose sums must be exact:
    ResBlock's 8 -> 8 3x3 layer on 16 tiles would take Winograd's transforms (which round) as a float layer."""
    from edgetorch.runtime.kernels import winograd

    calls = []
    monkeypatch.setattr(winograd, "step", lambda *args: calls.append(args))
    pte, args = _edgetorch_pte("res", "static")
    Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])
    assert calls == []
    assert winograd.eligible(3, 3, 1, 1, 1, 1, 1, 8, 8) and winograd.worth(1, 8, 8)
