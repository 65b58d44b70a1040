"""Copy elision in dynamic methods (edgetorch.runtime.fusion): a ``slice_copy``/``view_copy`` result becomes a
view of its input, or a kernel writes straight into its view's memory, only where nothing can overwrite that
memory while it is read; the results stay bit-identical to the unfused steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge
from edgetorch.extension.llm.export import export_llm
from edgetorch.runtime import Runtime
from edgetorch.runtime.kernels import compiled, llama
from tests.extension.llm.conftest import random_checkpoint


def _load(pte: bytes, fused: bool = True):
    method = Runtime.get().load_program(pte).load_method("forward")
    if not fused:
        method._executor.fused = None
    return method


def _step_names(method) -> list[str]:
    return [step.__name__ for step in method._executor.fused[0]]


def test_llm_decode_takes_views_and_gives_the_unfused_bits():
    checkpoint = random_checkpoint(seed=5, max_seq_len=8, max_context_len=32)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=32, use_sdpa_with_kv_cache=True)
    fused, plain = _load(pte), _load(pte, fused=False)
    names = _step_names(fused)
    layers = checkpoint.args.n_layers
    # q/k/v heads cut from the fused product are views; the attention writes into its view's memory.
    assert names.count("view_slice") >= 3 * layers
    assert names.count("llama::custom_sdpa.out into view") == layers
    assert_same_llm_steps(fused, plain, (6, 1, 1, 3, 1, 1))


def assert_same_llm_steps(fused, plain, rows: tuple[int, ...]) -> None:
    """Run two loaded LLM methods on the same random tokens, ``rows`` of them a step at successive positions,
    and require the same logits bit for bit."""
    rng = np.random.default_rng(0)
    pos = 0
    for n in rows:
        tokens = rng.integers(0, 100, (1, n))
        got = fused.execute([tokens, np.array([pos])])[0]
        want = plain.execute([tokens, np.array([pos])])[0]
        np.testing.assert_array_equal(got, want)
        pos += n


class _SliceThenWrite(torch.nn.Module):
    """Two slices: the cache's, read (by the clone) before the cache is written in place, may be a view; the
    input's, read after the planner has given the input's memory to later results, must stay a copy."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(8, 3), persistent=False)

    def forward(self, x, pos):
        old = self.cache[:4].clone()
        head = x[:, :2]
        self.cache.index_put_((pos,), x)
        return old * 2 + head.sum(), self.cache.sum(0)


def _slice_then_write() -> bytes:
    rows = torch.export.Dim("rows", min=1, max=4)
    args = (torch.ones(2, 3), torch.tensor([1, 2]))
    ep = torch.export.export(_SliceThenWrite(), args, dynamic_shapes=({0: rows}, {0: rows}), strict=False)
    edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return edge.to_executorch(ExecutorchBackendConfig(run_reinplace_pass=True)).buffer


def test_a_slice_of_memory_written_before_its_reader_stays_a_copy():
    pte = _slice_then_write()
    fused, plain = _load(pte), _load(pte, fused=False)
    ex = fused._executor
    assert [ex.describe(pc) for pc in range(len(ex.instructions))].count("aten::index_put_") == 1
    assert _step_names(fused)[0] == "view_slice" and _step_names(fused).count("view_slice") == 1
    module = _SliceThenWrite()
    for x, p in [(np.full((2, 3), 1.5, np.float32), [1, 2]), (np.ones((1, 3), np.float32), [0]),
                 (np.arange(12, dtype=np.float32).reshape(4, 3), [4, 5, 6, 7])]:  # fmt: skip
        got = fused.execute([x, np.array(p)])
        want = plain.execute([x, np.array(p)])
        with torch.no_grad():
            eager = module(torch.from_numpy(x), torch.tensor(p))
        for a, b, e in zip(got, want, eager):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_array_equal(a, e.numpy())


def test_dynamic_elision_asks_the_plans_overwrite_check(monkeypatch):
    """The dynamic path's overwrite check is the plan analysis's (PlanFacts.written_over, which static copy
    elision asks too): without it the input's slice becomes a view too, and reads the later results."""
    from edgetorch.runtime.plan_analysis import PlanFacts

    pte = _slice_then_write()
    x, p = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([4, 5, 6, 7])
    want = _load(pte, fused=False).execute([x, p])
    monkeypatch.setattr(PlanFacts, "written_over", lambda self, *args: False)
    reckless = _load(pte)
    assert _step_names(reckless).count("view_slice") == 2
    assert not all(np.array_equal(a, b) for a, b in zip(reckless.execute([x, p]), want))


@pytest.mark.parametrize("n_keys", [1, 7, 100])
def test_decode_attention_gives_the_general_paths_bits(n_keys, monkeypatch):
    monkeypatch.setattr(compiled, "kernel_if_loaded", lambda name: None)  # the NumPy paths, with numba or not
    rng = np.random.default_rng(n_keys)
    keys, values = (rng.standard_normal((1, 128, 3, 16)).astype(np.float32) for _ in range(2))
    query = rng.standard_normal((1, 1, 9, 16)).astype(np.float32)
    strided = np.empty((1, 1, 9, 32), np.float32)[..., ::2]  # not C-contiguous: the general path
    strided[...] = query
    lean = llama._attention(query, keys, values, n_keys - 1, None, True, None, np.empty_like(query))
    general = llama._attention(strided, keys, values, n_keys - 1, None, True, None, np.empty_like(query))
    np.testing.assert_array_equal(lean, general)


def test_the_last_reader_of_every_value_is_its_highest_reading_instruction():
    """plan_analysis.last_reads, the def-use that copy elision and the XNNPACK runtime's buffer pool share,
    names for each value the last instruction among its readers."""
    checkpoint = random_checkpoint(seed=2, max_seq_len=4, max_context_len=16)
    pte = export_llm(checkpoint, max_seq_len=4, max_context_len=16, use_sdpa_with_kv_cache=True)
    facts = _load(pte)._executor.facts
    assert facts.readers and facts.last_read == {j: max(pcs) for j, pcs in facts.readers.items()}
