"""The re-inplace pass: KV caches updated with ``index_put_`` (no copy, no write-back), same results."""

from __future__ import annotations

import numpy as np
import torch

from edgetorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
from edgetorch.extension.llm.export import build_model, export_llm
from edgetorch.runtime import Runtime
from tests.extension.llm.conftest import random_checkpoint


def _ops(pte: bytes) -> list[str]:
    method = Runtime.get().load_program(pte).load_method("forward")
    ex = method._executor
    return [ex.describe(pc) for pc in range(len(ex.instructions))]


def test_llm_caches_are_updated_in_place():
    checkpoint = random_checkpoint(seed=3, max_seq_len=8, max_context_len=16)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, use_sdpa_with_kv_cache=True)
    ops = _ops(pte)
    layers = checkpoint.args.n_layers
    assert ops.count("aten::index_put_") == 2 * layers
    assert "aten::index_put.out" not in ops and "aten::copy_" not in ops
    # Prefill, decode steps, then a different prompt length from position 0 again: same logits as eager.
    method = Runtime.get().load_program(pte).load_method("forward")
    model = build_model(checkpoint)
    tokens = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(4))
    calls = [(tokens[:, :5], 0), (tokens[:, 5:6], 5), (tokens[:, 6:7], 6), (tokens[:, 7:10], 0), (tokens[:, 10:11], 3)]
    with torch.no_grad():
        for chunk, pos in calls:
            expected = model(chunk, torch.tensor([pos])).numpy()
            got = method.execute([chunk.numpy(), np.array([pos])])[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


class _ReadsOldValue(torch.nn.Module):
    """Updates a buffer with index_put but also reads its old value after the update: must stay a copy."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 3), persistent=False)

    def forward(self, x, pos):
        new = torch.index_put(self.cache, (pos,), x)
        old = self.cache * 2  # traced after the update: an in-place update would change what it reads
        self.cache.copy_(new)
        return old.sum(0) + new.sum(0)


class _Writes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 3), persistent=False)

    def forward(self, x, pos):
        self.cache.index_put_((pos,), x)
        return self.cache.sum(0)


def _program(module: torch.nn.Module, reinplace: bool):
    args = (torch.ones(1, 3), torch.tensor([1]))
    ep = torch.export.export(module, args, strict=False)
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch(ExecutorchBackendConfig(run_reinplace_pass=reinplace)).buffer


def _run(pte: bytes) -> list[np.ndarray]:
    method = Runtime.get().load_program(pte).load_method("forward")
    steps = [
        (np.full((1, 3), 1.5, np.float32), 1),
        (np.full((1, 3), -2.0, np.float32), 3),
        (np.ones((1, 3), np.float32), 1),
    ]
    return [method.execute([x, np.array([p])])[0] for x, p in steps]


def test_reinplace_rewrites_only_when_the_old_value_is_dead():
    plain, inplace = _program(_Writes(), False), _program(_Writes(), True)
    assert "aten::index_put_" in _ops(inplace) and "aten::copy_" not in _ops(inplace)
    assert "aten::index_put.out" in _ops(plain) and "aten::copy_" in _ops(plain)
    for a, b in zip(_run(plain), _run(inplace)):
        np.testing.assert_array_equal(a, b)
    # The buffer's old value is read after the update: the copy stays, and so do the results.
    kept = _program(_ReadsOldValue(), True)
    assert "aten::index_put_" not in _ops(kept) and "aten::copy_" in _ops(kept)
    expected = _run(_program(_ReadsOldValue(), False))
    for a, b in zip(expected, _run(kept)):
        np.testing.assert_array_equal(a, b)
