"""Load-time fusion of element-wise chains (edgetorch.runtime.fusion): same bits as the unfused steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import EdgeCompileConfig, to_edge
from edgetorch.runtime import Runtime


class _Block(torch.nn.Module):
    """RMSNorm, a rotary embedding and a SwiGLU gate, written as the LLM exporter writes them."""

    def __init__(self, dim: int = 8, leak: bool = False):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.weight = torch.nn.Parameter(torch.rand(dim, generator=g) + 0.5)
        self.register_buffer("perm", torch.tensor([*range(dim // 2, dim), *range(dim // 2)]))
        self.register_buffer("cos", torch.rand(dim, generator=g))
        self.register_buffer("sin", torch.rand(dim, generator=g))
        self.up = torch.nn.Parameter(torch.randn(dim, 4 * dim, generator=g))
        self.leak = leak

    def forward(self, x):
        inv = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)
        h = self.weight * (x * inv)
        r = h * self.cos + torch.index_select(h, -1, self.perm) * self.sin
        gu = r @ self.up
        n = gu.shape[-1] // 2
        out = torch.nn.functional.silu(gu[:, :n]) * gu[:, n:]
        return (out, inv) if self.leak else out


def _method(module: torch.nn.Module):
    seq = torch.export.Dim("seq", min=1, max=16)
    ep = torch.export.export(module, (torch.ones(3, 8),), dynamic_shapes=({0: seq},), strict=False)
    pte = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch().buffer
    return Runtime.get().load_program(pte).load_method("forward")


def _unfused(module: torch.nn.Module):
    method = _method(module)
    method._executor.fused = None
    return method


@pytest.mark.parametrize("leak", [False, True], ids=["private", "intermediate-read"])
def test_fused_chains_give_the_same_bits_across_shape_changes(leak):
    module = _Block(leak=leak)
    fused, plain = _method(module), _unfused(module)
    ex = fused._executor
    assert ex.fused is not None
    steps, _ = ex.fused
    # The three chains are 6 + 4 + 5 instructions; with the rsqrt read outside, the RMSNorm stays unfused.
    assert len(ex.steps) - len(steps) == (3 + 4 if leak else 5 + 3 + 4)
    names = {step.__name__ for step in steps}
    assert {"rope", "swiglu"} <= names
    # Unfused, the RMSNorm's mean and add run as single bound float32 steps.
    assert ({"mean", "add"} if leak else {"rms_norm"}) <= names
    rng = np.random.default_rng(1)
    for seq in (3, 1, 16, 1, 5):
        x = rng.standard_normal((seq, 8)).astype(np.float32) * 3
        got, want = fused.execute([x]), plain.execute([x])
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        with torch.no_grad():
            eager = module(torch.from_numpy(x))
        eager = eager if leak else (eager,)
        for a, b in zip(got, eager):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-5)


def test_traced_runs_take_the_unfused_steps():
    method = _method(_Block())
    events = []

    class Tracer:
        current = 0

        def begin_run(self, executor):
            pass

        def instruction(self, executor, pc, t0, t1):
            events.append(pc)

        def end_run(self, executor, start, end):
            pass

    method._executor.tracer = Tracer()
    method.execute([np.ones((2, 8), np.float32)])
    assert events == list(range(len(method._executor.instructions)))  # every instruction, folded or not


class _ZeroD(torch.nn.Module):
    def forward(self, x, s):
        return x * 2, s.mean(-1), x.mean(-1, keepdim=True)


def test_bound_mean_of_a_0d_tensor_runs_the_kernel():
    seq = torch.export.Dim("seq", min=1, max=8)
    args = (torch.ones(3, 4), torch.tensor(2.5))
    ep = torch.export.export(_ZeroD(), args, dynamic_shapes=({0: seq}, None), strict=False)
    pte = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    assert method._executor.fused is not None
    assert [s.__name__ for s in method._executor.fused[0]].count("mean") == 2
    for n in (3, 1, 8):
        x = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        got = method.execute([x, np.float32(-1.5)])
        want = _ZeroD()(torch.from_numpy(x), torch.tensor(-1.5))
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b.numpy())
