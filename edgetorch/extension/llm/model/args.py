"""``ModelArgs``: the hyper-parameters of a decoder-only LLM, as read from a checkpoint's config."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ModelArgs:
    """What a :class:`~edgetorch.extension.llm.model.Transformer` is built from.

    ``arch`` is ``"llama"`` (RMSNorm, RoPE, SwiGLU, grouped-query attention; also SmolLM2 and Qwen2/3) or
    ``"gpt2"`` (LayerNorm, learned positions, GELU MLP). ``max_context_len`` sizes the KV cache,
    ``max_seq_len`` bounds the tokens of one call (the prefill chunk).
    """

    arch: str = "llama"
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int = 256
    hidden_dim: int = 128
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    tie_embeddings: bool = False
    qk_norm: bool = False
    attention_bias: bool = False
    max_seq_len: int = 128
    max_context_len: int = 128
    use_kv_cache: bool = True
    use_sdpa_with_kv_cache: bool = False
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.head_dim is None:
            self.head_dim = self.dim // self.n_heads
        if self.arch not in ("llama", "gpt2"):
            raise ValueError(f"arch must be 'llama' or 'gpt2', got {self.arch!r}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.max_context_len < self.max_seq_len:
            raise ValueError(
                f"max_context_len ({self.max_context_len}) must be at least max_seq_len ({self.max_seq_len})"
            )
