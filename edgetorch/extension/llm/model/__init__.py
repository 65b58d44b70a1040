"""Decoder-only transformer definitions for export: the Llama family and GPT-2, with a KV cache.

``ModelArgs`` describes an architecture; ``Transformer(args)`` builds it. The forward signature is
ExecuTorch's LLM convention: ``forward(tokens [1, seq_len] int64, input_pos [1] int64) -> logits`` of the
last position ``[1, vocab_size]``. May import torch.
"""

from edgetorch.extension.llm.model.args import ModelArgs
from edgetorch.extension.llm.model.transformer import Transformer

__all__ = ["ModelArgs", "Transformer"]
