"""Small random-weight LLMs shared by the LLM tests."""

from __future__ import annotations

import pytest
import torch

from edgetorch.extension.llm.export.checkpoint import Checkpoint
from edgetorch.extension.llm.model import ModelArgs, Transformer


def random_checkpoint(seed: int = 0, **overrides) -> Checkpoint:
    """A tiny Llama-family checkpoint with random weights (bos 1, eos 2)."""
    values = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=100, hidden_dim=96, tie_embeddings=True)
    values.update(overrides)
    args = ModelArgs(**values)
    torch.manual_seed(seed)
    model = Transformer(args)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.2)
    return Checkpoint(args, dict(model.state_dict()), bos_id=1, eos_ids=[2])


@pytest.fixture
def tiny_checkpoint() -> Checkpoint:
    return random_checkpoint()
