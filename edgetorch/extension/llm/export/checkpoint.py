"""Checkpoints -> (``ModelArgs``, state dict) for :class:`~edgetorch.extension.llm.model.Transformer`.

Two sources: a Hugging Face model folder (``config.json`` + ``*.safetensors``) and a GGUF file (its
tensors dequantized to float32 with the ``gguf`` package). Both are renamed to this package's module
names; GGUF's q/k projections, stored row-interleaved for llama.cpp's rotary layout, are put back in
the half-split layout the model uses. May import torch.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.model import ModelArgs


@dataclass
class Checkpoint:
    """A loaded checkpoint: the architecture, the weights, and what the tokenizer config says about bos/eos.

    ``q4_1_blocks`` maps a linear's module name to the ``(scale, min)`` of each 32-element block of its
    weight ``[out, in / 32]`` when a GGUF file stores it as Q4_1 (``weight = scale * q + min``, ``q`` in
    0..15): what ``quantize="8da4w-q41"`` keeps.
    """

    args: ModelArgs
    state_dict: dict[str, torch.Tensor]
    bos_id: int | None = None
    eos_ids: list[int] = field(default_factory=list)
    q4_1_blocks: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


_LLAMA_TYPES = ("llama", "qwen2", "qwen3", "mistral", "smollm2", "smollm3")


def load_checkpoint(path: str | Path, **overrides) -> Checkpoint:
    """Load a Hugging Face model folder or a ``.gguf`` file; ``overrides`` replace ``ModelArgs`` fields."""
    path = Path(path)
    if path.is_dir():
        return _load_hf(path, overrides)
    if path.suffix == ".gguf" or (path.is_file() and path.read_bytes()[:4] == b"GGUF"):
        return _load_gguf(path, overrides)
    raise InvalidInputError(
        f"checkpoint {str(path)!r} is neither a Hugging Face model folder (config.json + safetensors) nor a "
        "GGUF file; pass one of those"
    )


# ---- Hugging Face folders -------------------------------------------------------------------------------

_HF_LLAMA_NAMES = [
    (r"model\.embed_tokens\.weight", "tok_embeddings.weight"),
    (r"model\.norm\.weight", "norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", r"layers.\1.attention.w\2.\3"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.weight", r"layers.\1.attention.wo.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.([qk])_norm\.weight", r"layers.\1.attention.\2_norm.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate_proj\.weight", r"layers.\1.feed_forward.w1.weight"),
    (r"model\.layers\.(\d+)\.mlp\.down_proj\.weight", r"layers.\1.feed_forward.w2.weight"),
    (r"model\.layers\.(\d+)\.mlp\.up_proj\.weight", r"layers.\1.feed_forward.w3.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", r"layers.\1.attention_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", r"layers.\1.ffn_norm.weight"),
]
_HF_GPT2_NAMES = [
    (r"(?:transformer\.)?wte\.weight", "tok_embeddings.weight"),
    (r"(?:transformer\.)?wpe\.weight", "pos_embeddings.weight"),
    (r"(?:transformer\.)?ln_f\.(weight|bias)", r"norm.\1"),
    (r"lm_head\.weight", "output.weight"),
    (r"(?:transformer\.)?h\.(\d+)\.ln_1\.(weight|bias)", r"layers.\1.attention_norm.\2"),
    (r"(?:transformer\.)?h\.(\d+)\.ln_2\.(weight|bias)", r"layers.\1.ffn_norm.\2"),
    (r"(?:transformer\.)?h\.(\d+)\.attn\.c_attn\.(weight|bias)", r"layers.\1.attention.c_attn.\2"),
    (r"(?:transformer\.)?h\.(\d+)\.attn\.c_proj\.(weight|bias)", r"layers.\1.attention.wo.\2"),
    (r"(?:transformer\.)?h\.(\d+)\.mlp\.c_fc\.(weight|bias)", r"layers.\1.feed_forward.w1.\2"),
    (r"(?:transformer\.)?h\.(\d+)\.mlp\.c_proj\.(weight|bias)", r"layers.\1.feed_forward.w2.\2"),
]


def _rename(weights: dict[str, torch.Tensor], table: list[tuple[str, str]]) -> dict[str, torch.Tensor]:
    renamed = {}
    for name, tensor in weights.items():
        for pattern, target in table:
            if re.fullmatch(pattern, name):
                renamed[re.sub(pattern, target, name)] = tensor
                break
    return renamed


def _hf_args(config: dict, overrides: dict) -> ModelArgs:
    kind = config.get("model_type", "llama")
    if kind == "gpt2":
        values = dict(
            arch="gpt2",
            dim=config["n_embd"],
            n_layers=config["n_layer"],
            n_heads=config["n_head"],
            vocab_size=config["vocab_size"],
            hidden_dim=config.get("n_inner") or 4 * config["n_embd"],
            norm_eps=config.get("layer_norm_epsilon", 1e-5),
            tie_embeddings=True,
            max_context_len=min(config.get("n_positions", 1024), overrides.get("max_context_len", 1024)),
        )
    elif kind in _LLAMA_TYPES:
        # transformers >= 5 nests rope_theta and the scaling under rope_parameters; older configs do not.
        rope = dict(config.get("rope_parameters") or config.get("rope_scaling") or {})
        theta = rope.pop("rope_theta", config.get("rope_theta", 10000.0))
        values = dict(
            arch="llama",
            dim=config["hidden_size"],
            n_layers=config["num_hidden_layers"],
            n_heads=config["num_attention_heads"],
            n_kv_heads=config.get("num_key_value_heads"),
            head_dim=config.get("head_dim"),
            vocab_size=config["vocab_size"],
            hidden_dim=config["intermediate_size"],
            norm_eps=config.get("rms_norm_eps", 1e-5),
            rope_theta=theta,
            rope_scaling=rope or None,
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
            qk_norm=kind == "qwen3",
            attention_bias=bool(config.get("attention_bias", kind == "qwen2")),
        )
    else:
        raise InvalidInputError(
            f"model_type {kind!r} in config.json is not supported; expected gpt2 or one of {', '.join(_LLAMA_TYPES)}"
        )
    values.update(overrides)
    return ModelArgs(**values)


def _load_hf(folder: Path, overrides: dict) -> Checkpoint:
    from safetensors.torch import load_file

    config_path = folder / "config.json"
    if not config_path.exists():
        raise InvalidInputError(f"{str(folder)!r} has no config.json; a Hugging Face model folder needs one")
    config = json.loads(config_path.read_text())
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InvalidInputError(f"{str(folder)!r} has no *.safetensors weights; save the model with safetensors")
    weights = {}
    for file in files:
        weights.update(load_file(str(file)))
    args = _hf_args(config, overrides)
    if args.arch == "gpt2":
        state = _rename(weights, _HF_GPT2_NAMES)
        for name in list(state):
            if name.endswith(("c_attn.weight", "c_attn.bias")):
                # GPT-2 stores Conv1D weights as [in, out] and q/k/v fused.
                fused = state.pop(name)
                fused = fused.t() if fused.dim() == 2 else fused
                prefix, kind = name.rsplit(".c_attn.", 1)
                for part, chunk in zip("qkv", fused.chunk(3, dim=0)):
                    state[f"{prefix}.w{part}.{kind}"] = chunk.contiguous()
            elif re.search(r"\.(wo|w1|w2)\.weight$", name):
                state[name] = state[name].t().contiguous()
    else:
        state = _rename(weights, _HF_LLAMA_NAMES)
    bos, eos = _hf_special_ids(folder, config)
    return Checkpoint(args, _finish(state, args), bos, eos)


def _hf_special_ids(folder: Path, config: dict) -> tuple[int | None, list[int]]:
    generation = folder / "generation_config.json"
    extra = json.loads(generation.read_text()) if generation.exists() else {}
    bos = extra.get("bos_token_id", config.get("bos_token_id"))
    eos = extra.get("eos_token_id", config.get("eos_token_id"))
    eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    return bos, eos_ids


def _finish(state: dict[str, torch.Tensor], args: ModelArgs) -> dict[str, torch.Tensor]:
    state = {name: tensor.float() for name, tensor in state.items()}
    if "output.weight" not in state:
        args.tie_embeddings = True
    if args.tie_embeddings:
        state["output.weight"] = state["tok_embeddings.weight"]
    return state


# ---- GGUF ------------------------------------------------------------------------------------------------

_GGUF_NAMES = [
    (r"token_embd\.weight", "tok_embeddings.weight"),
    (r"output_norm\.weight", "norm.weight"),
    (r"output\.weight", "output.weight"),
    (r"blk\.(\d+)\.attn_([qkv])\.(weight|bias)", r"layers.\1.attention.w\2.\3"),
    (r"blk\.(\d+)\.attn_output\.weight", r"layers.\1.attention.wo.weight"),
    (r"blk\.(\d+)\.attn_([qk])_norm\.weight", r"layers.\1.attention.\2_norm.weight"),
    (r"blk\.(\d+)\.ffn_gate\.weight", r"layers.\1.feed_forward.w1.weight"),
    (r"blk\.(\d+)\.ffn_down\.weight", r"layers.\1.feed_forward.w2.weight"),
    (r"blk\.(\d+)\.ffn_up\.weight", r"layers.\1.feed_forward.w3.weight"),
    (r"blk\.(\d+)\.attn_norm\.weight", r"layers.\1.attention_norm.weight"),
    (r"blk\.(\d+)\.ffn_norm\.weight", r"layers.\1.ffn_norm.weight"),
]


def _unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row order (pairs interleaved per head) back to half-split rotary order."""
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _load_gguf(path: Path, overrides: dict) -> Checkpoint:
    import gguf

    from edgetorch.extension.llm.runner.gguf_reader import GGUFFile

    file = GGUFFile(path)
    meta = file.metadata.get
    arch = meta("general.architecture")
    if arch not in ("llama", "qwen2", "qwen3"):
        raise InvalidInputError(
            f"GGUF architecture {arch!r} is not supported; expected llama, qwen2 or qwen3 (SmolLM2 is llama)"
        )
    n_heads = meta(f"{arch}.attention.head_count")
    n_kv_heads = meta(f"{arch}.attention.head_count_kv", n_heads)
    dim = meta(f"{arch}.embedding_length")
    tokens = meta("tokenizer.ggml.tokens") or []
    values = dict(
        arch="llama",
        dim=dim,
        n_layers=meta(f"{arch}.block_count"),
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_dim=meta(f"{arch}.attention.key_length"),
        vocab_size=meta(f"{arch}.vocab_size", len(tokens)),
        hidden_dim=meta(f"{arch}.feed_forward_length"),
        norm_eps=meta(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
        rope_theta=meta(f"{arch}.rope.freq_base", 10000.0),
        qk_norm=arch == "qwen3",
        attention_bias=arch == "qwen2",
    )
    values.update(overrides)
    args = ModelArgs(**values)
    weights, blocks = {}, {}
    for tensor in file.tensors.values():
        kind = gguf.GGMLQuantizationType(tensor.ggml_type)
        block, block_bytes = gguf.GGML_QUANT_SIZES[kind]
        row_bytes = tensor.shape[-1] // block * block_bytes
        raw = tensor.data[: math.prod(tensor.shape[:-1]) * row_bytes].reshape(*tensor.shape[:-1], row_bytes)
        array = gguf.quants.dequantize(raw, kind)
        array = np.asarray(array, dtype=np.float32).reshape(tensor.shape)
        heads = None
        if arch == "llama" and re.fullmatch(r"blk\.\d+\.attn_[qk]\.weight", tensor.name):
            heads = n_heads if ".attn_q." in tensor.name else n_kv_heads
            array = _unpermute(array, heads)
        weights[tensor.name] = torch.from_numpy(np.array(array, copy=True))
        if kind == gguf.GGMLQuantizationType.Q4_1 and len(tensor.shape) == 2:
            blocks[tensor.name] = _q4_1_scales_and_mins(raw, heads)
    state = _rename(weights, _GGUF_NAMES)
    q4_1_blocks = {name.removesuffix(".weight"): pair for name, pair in _rename(blocks, _GGUF_NAMES).items()}
    bos = meta("tokenizer.ggml.bos_token_id")
    eos = meta("tokenizer.ggml.eos_token_id")
    eos_ids = [eos] if eos is not None else []
    for name in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
        if name in tokens and tokens.index(name) not in eos_ids:
            eos_ids.append(tokens.index(name))
    return Checkpoint(args, _finish(state, args), bos, eos_ids, q4_1_blocks)


def _q4_1_scales_and_mins(raw: np.ndarray, heads: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The float16 scale and min heading each 20-byte Q4_1 block (then 16 bytes of nibbles), as float32
    ``[rows, blocks]``, rows in the same order as the dequantized weight."""
    rows = raw.reshape(raw.shape[0], -1, 20)
    scale = np.ascontiguousarray(rows[..., 0:2]).view(np.float16)[..., 0].astype(np.float32)
    low = np.ascontiguousarray(rows[..., 2:4]).view(np.float16)[..., 0].astype(np.float32)
    if heads is not None:
        scale, low = _unpermute(scale, heads), _unpermute(low, heads)
    return torch.from_numpy(np.array(scale, copy=True)), torch.from_numpy(np.array(low, copy=True))
