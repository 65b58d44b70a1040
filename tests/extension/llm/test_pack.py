"""``pack_for_decode``: the packed model computes what the model it was made from computes, in eager."""

from __future__ import annotations

import pytest
import torch

from edgetorch.extension.llm.embedding_quant import quantize_embeddings
from edgetorch.extension.llm.export import build_model
from edgetorch.extension.llm.model.transformer import PackedLinear, pack_for_decode
from tests.extension.llm.conftest import random_checkpoint


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(use_sdpa_with_kv_cache=True),
        dict(tie_embeddings=False),
        dict(qk_norm=True, attention_bias=True, head_dim=24),
        dict(arch="gpt2", n_kv_heads=4),
        dict(use_kv_cache=False),
    ],
    ids=["llama", "custom-sdpa", "untied", "qwen3-like", "gpt2", "no-cache"],
)
def test_packed_model_matches_the_original(overrides):
    checkpoint = random_checkpoint(seed=4, max_seq_len=8, max_context_len=16, **overrides)
    original, packed = build_model(checkpoint), pack_for_decode(build_model(checkpoint))
    assert not any(type(m) is torch.nn.Linear for m in packed.modules())
    assert (hasattr(packed, "tok_embeddings")) == (not checkpoint.args.tie_embeddings)
    tokens = torch.randint(0, 100, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if not checkpoint.args.use_kv_cache:
            torch.testing.assert_close(packed(tokens), original(tokens), rtol=1e-5, atol=1e-5)
            return
        torch.testing.assert_close(packed(tokens[:, :5], torch.tensor([0])), original(tokens[:, :5], torch.tensor([0])))
        for i in (5, 6):  # decode steps read the caches the prefill wrote
            step = tokens[:, i : i + 1], torch.tensor([i])
            torch.testing.assert_close(packed(*step), original(*step), rtol=1e-5, atol=1e-5)


def test_packing_keeps_a_quantized_embedding_and_fuses_projections():
    checkpoint = random_checkpoint(seed=4, max_seq_len=8, max_context_len=16)
    original = build_model(checkpoint)
    quantize_embeddings(original, "8,0")
    packed = build_model(checkpoint)
    quantize_embeddings(packed, "8,0")
    pack_for_decode(packed)
    assert type(packed.tok_embeddings).__name__ == "QuantizedEmbedding"
    attention = packed.layers[0].attention
    assert isinstance(attention.wqkv, PackedLinear) and attention.wqkv.weight_t.shape == (64, 64 + 2 * 32)
    assert packed.layers[0].feed_forward.w13.weight_t.shape == (64, 2 * 96)
    tokens = torch.tensor([[3, 14, 15, 92]])
    with torch.no_grad():
        torch.testing.assert_close(packed(tokens, torch.tensor([0])), original(tokens, torch.tensor([0])))


@pytest.mark.parametrize(
    "overrides", [dict(), dict(qk_norm=True, attention_bias=True, head_dim=24)], ids=["llama", "qwen3-like"]
)
def test_packing_as_linears_keeps_linears_and_quantizes_like_the_parts(overrides):
    from edgetorch.extension.llm.export import quantize_model

    checkpoint = random_checkpoint(seed=6, max_seq_len=8, max_context_len=16, hidden_dim=128, **overrides)
    original, packed = build_model(checkpoint), pack_for_decode(build_model(checkpoint), linears=True)
    attention = packed.layers[0].attention
    assert type(attention.wqkv) is torch.nn.Linear and type(packed.layers[0].feed_forward.w13) is torch.nn.Linear
    assert type(packed.output) is torch.nn.Linear and hasattr(packed, "tok_embeddings")
    tokens = torch.randint(0, 100, (1, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(packed(tokens[:, :5], torch.tensor([0])), original(tokens[:, :5], torch.tensor([0])))
    # 8da4w quantizes each row's groups on their own, so the stacked matrix gives what its parts give.
    quantize_model(original, "8da4w", 32)
    quantize_model(packed, "8da4w", 32)
    with torch.no_grad():
        for chunk, pos in ((tokens[:, :5], 0), (tokens[:, 5:6], 5), (tokens[:, 6:7], 6)):
            torch.testing.assert_close(
                packed(chunk, torch.tensor([pos])), original(chunk, torch.tensor([pos])), rtol=1e-5, atol=1e-5
            )


def test_delegated_packing_keeps_gate_and_up_apart_and_norms_as_linears():
    """``pack_for_decode(linears=True, delegated=True)`` (the XNNPACK export): gate and up stay two linears,
    each RMSNorm's mean is a linear, the model computes what it did; the exported program needs fewer
    delegates and no ``mean``."""
    from edgetorch.extension.llm.export import export_llm
    from edgetorch.extension.llm.model.transformer import RMSNorm

    checkpoint = random_checkpoint(seed=4, max_seq_len=8, max_context_len=16)
    original = build_model(checkpoint)
    packed = pack_for_decode(build_model(checkpoint), linears=True, delegated=True)
    ffn = packed.layers[0].feed_forward
    assert not hasattr(ffn, "w13") and isinstance(ffn.w1, torch.nn.Linear) and isinstance(ffn.w3, torch.nn.Linear)
    assert all(m.mean_row is not None for m in packed.modules() if isinstance(m, RMSNorm))
    tokens = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for step in ((tokens[:, :5], torch.tensor([0])), (tokens[:, 5:], torch.tensor([5]))):
            torch.testing.assert_close(packed(*step), original(*step), rtol=1e-5, atol=1e-5)
    from edgetorch.runtime import Runtime

    def counts(pte: bytes) -> tuple[int, int]:
        executor = Runtime.get().load_program(pte).load_method("forward")._executor
        names = [executor.describe(pc) for pc in range(len(executor.instructions))]
        return sum(n.startswith("delegate") for n in names), sum("mean" in n for n in names)

    options = dict(max_seq_len=8, max_context_len=16, quantize="8da4w", use_sdpa_with_kv_cache=True)
    delegated = counts(export_llm(checkpoint, backend="xnnpack", **options))
    assert delegated[1] == 0, delegated
    assert delegated[0] <= 3 * checkpoint.args.n_layers + 2, delegated
