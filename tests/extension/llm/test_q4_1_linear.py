"""``quantize="8da4w-q41"``: a Q4_1 GGUF's own blocks as 8da4w weights plus a per-block offset term.

A tiny random Llama GGUF with Q4_1 linears (written with the ``gguf`` package): the quantized linears
compute exactly the file's dequantized weights (checked without activation quantization), and the
exported program matches the eager quantized model on our runtime and is closer to the float model than
plain 8da4w (which re-quantizes the weights).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export import build_model, export_llm, load_checkpoint, quantize_model
from edgetorch.extension.llm.q4_1_linear import Q41Linear
from edgetorch.runtime import Runtime
from tests.extension.llm.conftest import random_checkpoint

gguf = pytest.importorskip("gguf")

DIM, HIDDEN, HEADS, KV_HEADS, LAYERS, VOCAB = 64, 96, 4, 2, 2, 40


@pytest.fixture(scope="module")
def q4_1_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("q41") / "tiny-q4_1.gguf"
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_embedding_length(DIM)
    writer.add_feed_forward_length(HIDDEN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(VOCAB)])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)

    def add(name, shape, q4_1=True, offset=0.0):
        values = (rng.standard_normal(shape) * 0.3 + offset).astype(np.float32)
        if not q4_1:
            writer.add_tensor(name, values)
            return
        packed = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q4_1)
        writer.add_tensor(name, packed, raw_shape=packed.shape, raw_dtype=gguf.GGMLQuantizationType.Q4_1)

    add("token_embd.weight", (VOCAB, DIM), q4_1=False)
    add("output_norm.weight", (DIM,), q4_1=False, offset=1.0)
    head_dim = DIM // HEADS
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", (DIM,), q4_1=False, offset=1.0)
        add(f"blk.{i}.ffn_norm.weight", (DIM,), q4_1=False, offset=1.0)
        add(f"blk.{i}.attn_q.weight", (HEADS * head_dim, DIM), offset=0.2)  # off-centre blocks, like Q4_1's
        add(f"blk.{i}.attn_k.weight", (KV_HEADS * head_dim, DIM))
        add(f"blk.{i}.attn_v.weight", (KV_HEADS * head_dim, DIM), offset=-0.1)
        add(f"blk.{i}.attn_output.weight", (DIM, HEADS * head_dim))
        add(f"blk.{i}.ffn_gate.weight", (HIDDEN, DIM))
        add(f"blk.{i}.ffn_up.weight", (HIDDEN, DIM), offset=0.3)
        add(f"blk.{i}.ffn_down.weight", (DIM, HIDDEN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _checkpoint(path):
    return load_checkpoint(path, max_seq_len=8, max_context_len=16)


def test_q4_1_linears_compute_the_gguf_weights(q4_1_gguf):
    checkpoint = _checkpoint(q4_1_gguf)
    assert len(checkpoint.q4_1_blocks) == 7 * LAYERS
    model = build_model(checkpoint)
    quantize_model(model, "8da4w-q41", 32, checkpoint.q4_1_blocks)
    swapped = {name: m for name, m in model.named_modules() if isinstance(m, Q41Linear)}
    assert sorted(swapped) == sorted(checkpoint.q4_1_blocks)
    for name, module in swapped.items():
        int4 = module.linear.weight.dequantize()
        offsets = module.offsets.weight.repeat_interleave(32, dim=1)
        q = module.linear.weight.qdata
        assert int(q.min()) >= -8 and int(q.max()) <= 7 and not module.linear.weight.zero_point.any()
        torch.testing.assert_close(int4 + offsets, checkpoint.state_dict[f"{name}.weight"], rtol=0, atol=1e-6)


def test_q4_1_program_matches_eager(q4_1_gguf):
    checkpoint = _checkpoint(q4_1_gguf)
    pte = export_llm(q4_1_gguf, max_seq_len=8, max_context_len=16, quantize="8da4w-q41")
    model = build_model(checkpoint)
    quantize_model(model, "8da4w-q41", 32, checkpoint.q4_1_blocks)
    reference = build_model(_checkpoint(q4_1_gguf))
    requantized = build_model(_checkpoint(q4_1_gguf))
    quantize_model(requantized, "8da4w", 32)
    method = Runtime.get().load_program(pte).load_method("forward")
    tokens = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for chunk, pos in ((tokens[:, :5], 0), (tokens[:, 5:], 5)):
            expected = model(chunk, torch.tensor([pos])).numpy()
            got = method.execute([chunk.numpy(), np.array([pos])])[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
            # keeping the file's blocks is closer to the float model than re-quantizing its weights
            exact = reference(chunk, torch.tensor([pos])).numpy()
            plain = requantized(chunk, torch.tensor([pos])).numpy()
            assert np.abs(got - exact).mean() < 0.5 * np.abs(plain - exact).mean()


def test_q4_1_mode_needs_q4_1_blocks_and_groups_of_32(q4_1_gguf):
    with pytest.raises(InvalidInputError, match="no Q4_1"):
        export_llm(random_checkpoint(), max_seq_len=8, max_context_len=16, quantize="8da4w-q41")
    with pytest.raises(InvalidInputError, match="group size"):
        export_llm(_checkpoint(q4_1_gguf), max_seq_len=8, max_context_len=16, quantize="8da4w-q41", group_size=64)


def test_q4_1_xnnpack_program_runs_on_executorch(q4_1_gguf):
    """One XNNPACK delegate (QB4W int4 weights + the float offsets linear) that ExecuTorch's runtime runs
    as ours does; XNNPACK stores the scales in bfloat16, so eager float scales are only close."""
    from tests.oracle import run_executorch_calls

    pte = export_llm(q4_1_gguf, max_seq_len=8, max_context_len=16, quantize="8da4w-q41", backend="xnnpack")
    tokens = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(5))
    calls = [[tokens[:, :5].numpy(), np.array([0])], [tokens[:, 5:6].numpy(), np.array([5])]]
    theirs = run_executorch_calls(pte, calls)
    method = Runtime.get().load_program(pte).load_method("forward")
    checkpoint = _checkpoint(q4_1_gguf)
    model = build_model(checkpoint)
    quantize_model(model, "8da4w-q41", 32, checkpoint.q4_1_blocks)
    with torch.no_grad():
        for call, their in zip(calls, theirs):
            ours = method.execute(call)[0]
            np.testing.assert_allclose(ours, their[0], rtol=1e-3, atol=1e-3)
            eager = model(*(torch.from_numpy(a) for a in call)).numpy()
            assert np.abs(ours - eager).max() < 0.05 * np.abs(eager).max()
