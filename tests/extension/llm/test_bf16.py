"""``export_llm(dtype="bf16")``: a bfloat16 program (ml_dtypes on our runtime) whose greedy tokens follow fp32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export import build_model, export_llm
from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner
from edgetorch.extension.llm.runner.tokenizer import Tokenizer
from edgetorch.runtime import Runtime
from tests.extension.llm.conftest import random_checkpoint

PROMPT = [1, 5, 9, 13, 40]


class IdTokenizer(Tokenizer):
    """Token ids written as decimal words: lets the runner take ids straight from the test."""

    def encode(self, text: str) -> list[int]:
        return [int(word) for word in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(map(str, ids))


def _eager_greedy(checkpoint, n: int) -> list[int]:
    model = build_model(checkpoint)
    out: list[int] = []
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT]), torch.tensor([0]))
        for pos in range(len(PROMPT), len(PROMPT) + n):
            out.append(int(logits.argmax()))
            logits = model(torch.tensor([out[-1:]]), torch.tensor([pos]))
    return out


def test_bf16_program_follows_fp32_greedy(tmp_path):
    checkpoint = random_checkpoint(seed=0, max_seq_len=8, max_context_len=32)
    path = tmp_path / "bf16.pte"
    size = len(export_llm(checkpoint, path, max_seq_len=8, max_context_len=32, dtype="bf16"))
    fp32_weights = sum(t.numel() * 4 for t in checkpoint.state_dict.values())
    assert size < 0.6 * fp32_weights  # the weights are stored in 2 bytes

    method = Runtime.get().load_program(path).load_method("forward")
    logits = method.execute([np.array([PROMPT]), np.array([0])])[0]
    assert logits.dtype.name == "bfloat16"
    with torch.no_grad():
        expected = build_model(checkpoint)(torch.tensor([PROMPT]), torch.tensor([0])).numpy()
    np.testing.assert_allclose(logits.astype(np.float32), expected, atol=0.03 * np.abs(expected).max())

    runner = TextLLMRunner(path, IdTokenizer())
    runner.load()
    runner.metadata["get_eos_ids"] = []  # a fixed number of tokens, as the reference makes
    tokens = runner.generate_ids(PROMPT, GenerationConfig(temperature=0, max_new_tokens=16))
    assert tokens == _eager_greedy(checkpoint, 16)


def test_unknown_dtype_is_refused(tiny_checkpoint):
    with pytest.raises(InvalidInputError, match="dtype"):
        export_llm(tiny_checkpoint, dtype="fp16")
