"""export_llm: Hugging Face/GGUF loading against transformers, and exported programs against eager."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export import build_model, export_llm, load_checkpoint
from edgetorch.runtime import Runtime
from tests.extension.llm.conftest import random_checkpoint


def _hf_model(kind: str):
    import transformers

    torch.manual_seed(0)
    if kind == "gpt2":
        config = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=120, n_positions=64)
        return transformers.GPT2LMHeadModel(config)
    common = dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=120, max_position_embeddings=64, tie_word_embeddings=kind != "llama3",
    )  # fmt: skip
    if kind == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=24, **common))
    if kind == "qwen2":
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**common))
    scaling = None
    if kind == "llama3":
        scaling = dict(
            rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=16,
        )  # fmt: skip
    config = transformers.LlamaConfig(rope_theta=500000.0, rope_scaling=scaling, **common)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize("kind", ["llama", "llama3", "qwen2", "qwen3", "gpt2"])
def test_hf_checkpoint_matches_transformers(kind, tmp_path):
    hf = _hf_model(kind).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.05)  # non-trivial norms and biases
    hf.save_pretrained(tmp_path)
    checkpoint = load_checkpoint(tmp_path, max_seq_len=16, max_context_len=32)
    model = build_model(checkpoint)
    tokens = torch.randint(0, 120, (1, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
        got = model(tokens[:, :4], torch.tensor([0]))
        torch.testing.assert_close(got, expected[:, 3], rtol=1e-4, atol=1e-4)
        for i in range(4, 7):  # decode with the cache
            got = model(tokens[:, i : i + 1], torch.tensor([i]))
            torch.testing.assert_close(got, expected[:, i], rtol=1e-4, atol=1e-4)


def _run_against_eager(checkpoint, pte: bytes, prompt_len: int = 5, steps: int = 4) -> None:
    program = Runtime.get().load_program(pte)
    method = program.load_method("forward")
    model = build_model(checkpoint)
    tokens = torch.randint(0, checkpoint.args.vocab_size, (1, prompt_len + steps), generator=torch.Generator())
    with torch.no_grad():
        expected = model(tokens[:, :prompt_len], torch.tensor([0]))
        got = method.execute([tokens[:, :prompt_len].numpy(), np.array([0])])[0]
        np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)
        for i in range(prompt_len, prompt_len + steps):
            expected = model(tokens[:, i : i + 1], torch.tensor([i]))
            got = method.execute([tokens[:, i : i + 1].numpy(), np.array([i])])[0]
            np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "options",
    [
        dict(backend="portable"),
        dict(backend="portable", use_sdpa_with_kv_cache=True),
        dict(backend="xnnpack"),
        dict(backend="portable", arch_overrides=dict(qk_norm=True, attention_bias=True, head_dim=24)),
        dict(backend="portable", arch_overrides=dict(arch="gpt2", n_kv_heads=4)),
    ],
    ids=["portable", "custom-sdpa", "xnnpack", "qwen3-like", "gpt2"],
)
def test_exported_program_matches_eager(options):
    options = dict(options)
    checkpoint = random_checkpoint(**options.pop("arch_overrides", {}))
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, **options)
    checkpoint = dataclasses.replace(checkpoint, args=dataclasses.replace(checkpoint.args))
    _run_against_eager(checkpoint, pte)
    program = Runtime.get().load_program(pte)
    meta = {name: program.load_method(name).execute([]) for name in program.method_names if name != "forward"}
    assert meta["get_bos_id"] == [1] and meta["get_eos_ids"] == [2]
    assert meta["get_max_seq_len"] == [8] and meta["get_max_context_len"] == [16]
    assert meta["get_vocab_size"] == [100] and meta["use_kv_cache"] == [True]
    assert meta["enable_dynamic_shape"] == [True]


def test_export_rejects_bad_options(tiny_checkpoint):
    with pytest.raises(InvalidInputError, match="max_context_len"):
        export_llm(tiny_checkpoint, max_seq_len=64, max_context_len=32)
    with pytest.raises(InvalidInputError, match="backend"):
        export_llm(tiny_checkpoint, backend="vulkan")
    with pytest.raises(InvalidInputError, match="neither"):
        load_checkpoint("/nonexistent/model.bin")


@pytest.mark.parametrize(("mode", "backend"), [("int8", "portable"), ("8da4w", "portable"), ("int8", "xnnpack")])
def test_quantized_program_matches_quantized_eager(mode, backend):
    from edgetorch.extension.llm.export import quantize_model

    checkpoint = random_checkpoint(hidden_dim=128, max_seq_len=8, max_context_len=16)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, quantize=mode, group_size=32, backend=backend)
    model = build_model(checkpoint)
    quantize_model(model, mode, 32)
    method = Runtime.get().load_program(pte).load_method("forward")
    tokens = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(4))
    calls = [[tokens[:, :5].numpy(), np.array([0])], [tokens[:, 5:].numpy(), np.array([5])]]
    with torch.no_grad():
        expected = [model(torch.from_numpy(tok), torch.from_numpy(pos)).numpy() for tok, pos in calls]
    for (tok, pos), want in zip(calls, expected):
        np.testing.assert_allclose(method.execute([tok, pos])[0], want, rtol=1e-4, atol=1e-4)
    if backend == "xnnpack":  # weight-only int8: the dequantizing ops stay portable, the linears go to XNNPACK
        from tests.oracle import run_executorch_calls

        for got, want in zip(run_executorch_calls(pte, calls), expected):
            np.testing.assert_allclose(got[0], want, rtol=1e-4, atol=1e-4)


def test_8da4w_output_in_8_bits_and_a_tied_table_stored_once():
    """8da4w quantizes the output projection too, with int8 per-channel weights (ExecuTorch's
    8da4w_output_8da8w); a tied token table becomes those int8 values, which the XNNPACK program stores once."""
    from edgetorch.extension.llm.export import quantize_model
    from edgetorch.extension.llm.model.transformer import pack_for_decode

    checkpoint = random_checkpoint(hidden_dim=128, max_seq_len=8, max_context_len=16)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, quantize="8da4w", backend="xnnpack")
    model = pack_for_decode(build_model(checkpoint), linears=True)
    quantize_model(model, "8da4w", 32)
    table, head = model.tok_embeddings.weight, model.output.weight
    assert table.dtype == torch.int8 and tuple(table.shape) == (100, 64)
    assert torch.equal(head.qdata, table) and head.target_dtype == torch.int8
    assert pte.count(table.numpy().tobytes()) == 1  # the delegate's weight and the embedding's table: one copy
    untied = pack_for_decode(build_model(checkpoint), linears=True)
    quantize_model(untied, "8da4w", 32, tie_embedding=False)
    assert type(untied.tok_embeddings) is torch.nn.Embedding  # tie_embedding=False keeps the float table
    tokens = torch.randint(0, 100, (1, 6), generator=torch.Generator().manual_seed(4))
    method = Runtime.get().load_program(pte).load_method("forward")
    with torch.no_grad():
        for tok, pos in ((tokens[:, :5], 0), (tokens[:, 5:], 5)):
            want = model(tok, torch.tensor([pos])).numpy()
            got = method.execute([tok.numpy(), np.array([pos])])[0]
            # XNNPACK's 4-bit weights keep bfloat16 scales: close to the eager model, not equal
            np.testing.assert_allclose(got, want, rtol=0.05, atol=0.05 * np.abs(want).max())


def test_fp32_xnnpack_head_is_a_delegate_constant_stored_once():
    """fp32 with XNNPACK: a tied output matrix gets its own copy, so the delegate holds it as a constant (a weight
    shared with the embedding would be a delegate input, copied in at every call); the file keeps one copy."""
    import gc

    from edgetorch.backends.xnnpack.runtime import XnnpackDelegate

    checkpoint = random_checkpoint(max_seq_len=8, max_context_len=16)
    table = checkpoint.state_dict["tok_embeddings.weight"].numpy()
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, backend="xnnpack")
    assert pte.count(table.tobytes()) == 1
    # issubclass(type(o)): isinstance on a weakref proxy whose object died (another test's) raises ReferenceError
    before = {id(o) for o in gc.get_objects() if issubclass(type(o), XnnpackDelegate)}
    method = Runtime.get().load_program(pte).load_method("forward")
    delegates = [o for o in gc.get_objects() if issubclass(type(o), XnnpackDelegate) and id(o) not in before]
    shapes = [tuple(c.shape) for d in delegates for c in d.graph.constants.values()]
    assert table.shape in shapes or table.T.shape in shapes, shapes
    tokens = torch.randint(0, 100, (1, 5), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = build_model(checkpoint)(tokens, torch.tensor([0])).numpy()
    got = method.execute([tokens.numpy(), np.array([0])])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
