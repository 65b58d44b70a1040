"""Our LLM programs on ExecuTorch's runtime (in a subprocess, its llama custom-ops library loaded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.extension.llm.export import build_model, export_llm
from tests.extension.llm.conftest import random_checkpoint
from tests.oracle import run_executorch_calls


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(use_sdpa_with_kv_cache=True),
        pytest.param(
            dict(backend="xnnpack"),
            marks=pytest.mark.xfail(
                strict=True,
                reason="ExecuTorch's XNNPACK runtime segfaults on our dynamic-length LLM blob (runs in edgetorch)",
            ),
        ),
    ],
    ids=["portable", "custom-sdpa", "xnnpack"],
)
def test_llm_pte_runs_on_executorch(options):
    checkpoint = random_checkpoint(seed=5, max_seq_len=8, max_context_len=16)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, **options)
    tokens = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(2))
    # A prefill of 5 tokens, then single-token decode steps: the KV cache carries between calls.
    calls = [[tokens[:, :5].numpy(), np.array([0])]] + [
        [tokens[:, i : i + 1].numpy(), np.array([i])] for i in (5, 6, 7)
    ]
    outputs = run_executorch_calls(pte, calls, llama_ops=options.get("use_sdpa_with_kv_cache", False))
    model = build_model(checkpoint)
    with torch.no_grad():
        for (tok, pos), got in zip(calls, outputs):
            expected = model(torch.from_numpy(tok), torch.from_numpy(pos)).numpy()
            np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-4)
    assert run_executorch_calls(pte, [[]], method="get_eos_ids")[0] == [2]
