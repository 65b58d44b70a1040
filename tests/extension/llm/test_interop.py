"""Our LLM programs on ExecuTorch's runtime (in a subprocess, its llama custom-ops library loaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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
        dict(backend="xnnpack"),
        dict(backend="xnnpack", quantize="8da4w", use_sdpa_with_kv_cache=True),
    ],
    ids=["portable", "custom-sdpa", "xnnpack", "xnnpack-8da4w"],
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
    if "quantize" in options:
        # XNNPACK's 4-bit weights keep bfloat16 scales, so the reference is our runtime running the same program.
        from edgetorch.runtime import Runtime

        method = Runtime.get().load_program(pte).load_method("forward")
        for (tok, pos), got in zip(calls, outputs):
            np.testing.assert_allclose(got[0], method.execute([tok, pos])[0], rtol=1e-3, atol=1e-3)
    else:
        model = build_model(checkpoint)
        with torch.no_grad():
            for (tok, pos), got in zip(calls, outputs):
                expected = model(torch.from_numpy(tok), torch.from_numpy(pos)).numpy()
                np.testing.assert_allclose(got[0], expected, rtol=1e-4, atol=1e-4)
    assert run_executorch_calls(pte, [[]], method="get_eos_ids")[0] == [2]


@pytest.mark.skipif(
    os.environ.get("EDGETORCH_LLM_FULL") != "1", reason="ExecuTorch's export_llm takes minutes; EDGETORCH_LLM_FULL=1"
)
def test_executorch_export_llm_output_runs_on_edgetorch(tmp_path):
    """ExecuTorch's export_llm (custom SDPA, custom KV cache) of our random checkpoint, run on edgetorch."""
    from edgetorch.runtime import Runtime

    checkpoint = random_checkpoint(seed=7, vocab_size=128, hidden_dim=192, tie_embeddings=False)
    torch.save(dict(checkpoint.state_dict), tmp_path / "consolidated.pth")
    params = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128, hidden_dim=192, norm_eps=1e-5,
                  rope_theta=10000.0, use_hf_rope=True)  # fmt: skip
    (tmp_path / "params.json").write_text(json.dumps(params))
    command = [
        sys.executable, "-m", "executorch.extension.llm.export.export_llm", "base.model_class=llama3",
        f"base.params={tmp_path / 'params.json'}", f"base.checkpoint={tmp_path / 'consolidated.pth'}",
        "model.use_kv_cache=True", "model.use_sdpa_with_kv_cache=True", "model.enable_dynamic_shape=True",
        "export.max_seq_length=16", "export.max_context_length=32", f"export.output_dir={tmp_path}",
        "export.output_name=et.pte",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    program = Runtime.get().load_program(tmp_path / "et.pte")
    method = program.load_method("forward")
    checkpoint.args.max_seq_len, checkpoint.args.max_context_len = 16, 32
    model = build_model(checkpoint)
    tokens = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        for chunk, pos in [(tokens[:, :5], 0)] + [(tokens[:, i : i + 1], i) for i in (5, 6, 7)]:
            expected = model(chunk, torch.tensor([pos])).numpy()
            got = method.execute([chunk.numpy(), np.array([pos])])[0]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert program.load_method("get_max_context_len").execute([]) == [32]
