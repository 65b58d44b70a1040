"""4/8-bit embedding tables (``export_llm(embedding_quantize=...)``): the AOT ops against ExecuTorch's, the
runtime kernels against the AOT ops, and an exported program against eager and on ExecuTorch's runtime."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.embedding_quant import QuantizedEmbedding, parse_embedding_quantize, quantize_embeddings
from edgetorch.extension.llm.export import build_model, export_llm
from edgetorch.runtime import Runtime
from edgetorch.runtime.kernels.registry import lookup
from tests.extension.llm.conftest import random_checkpoint
from tests.oracle import run_executorch_calls

OP_NAMES = {8: "embedding_byte", 4: "embedding_4bit"}


@pytest.mark.parametrize("bits, group_size", [(8, 0), (8, 16), (4, 0), (4, 8)])
def test_table_round_trip_and_runtime_kernel(bits, group_size):
    weight = torch.randn(20, 32, generator=torch.Generator().manual_seed(bits + group_size))
    table = QuantizedEmbedding(weight, bits, group_size)
    assert table.weight.dtype == (torch.int8 if bits == 8 else torch.uint8)
    assert table.weight.shape == (20, 32 if bits == 8 else 16)
    assert table.scales.shape == ((20,) if group_size == 0 else (20, 32 // group_size))
    indices = torch.tensor([[3, 0, 19, 3]])
    got = table(indices)
    assert got.shape == (1, 4, 32)
    # Within half a quantization step of the float table.
    step = table.scales.reshape(20, -1).repeat_interleave(32 // table.scales.reshape(20, -1).shape[1], dim=1)
    assert torch.all((got[0] - weight[indices[0]]).abs() <= step[indices[0]] / 2 + 1e-6)
    # The runtime kernel (the .out variant a .pte calls) computes the same rows.
    fn, _ = lookup(f"quantized_decomposed::{OP_NAMES[bits]}.out")
    out = np.empty((1, 4, 32), np.float32)
    result = fn(table.weight.numpy(), table.scales.numpy(), None, table.qmin, table.qmax, indices.numpy(), out)
    np.testing.assert_array_equal(result, got.numpy())


def test_executorch_ops_import_after_ours():
    """ExecuTorch's quantized_decomposed embedding ops load after ours and compute the same rows."""
    code = textwrap.dedent(
        """
        import torch
        from edgetorch.extension.llm.embedding_quant import LIBRARY, QuantizedEmbedding
        weight = torch.randn(12, 16, generator=torch.Generator().manual_seed(0))
        tables = [QuantizedEmbedding(weight, 8, 0), QuantizedEmbedding(weight, 4, 8)]
        indices = torch.tensor([[1, 11, 4]])
        ours = [t(indices) for t in tables]
        assert LIBRARY.defined_by_edgetorch
        import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401
        assert not LIBRARY.defined_by_edgetorch
        for t, mine in zip(tables, ours):
            torch.testing.assert_close(t(indices), mine, rtol=0, atol=0)
        print("ok")
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


def test_quantized_embedding_program_matches_eager_and_runs_on_executorch():
    checkpoint = random_checkpoint(seed=2, max_seq_len=8, max_context_len=16)
    pte = export_llm(checkpoint, max_seq_len=8, max_context_len=16, embedding_quantize="4,32")
    method = Runtime.get().load_program(pte).load_method("forward")
    assert "quantized_decomposed::embedding_4bit.out" in method.operators
    model = build_model(checkpoint)
    quantize_embeddings(model, "4,32")
    tokens = torch.tensor([[5, 17, 33, 8, 9, 70]])
    calls = [[tokens[:, :5].numpy(), np.array([0])], [tokens[:, 5:].numpy(), np.array([5])]]
    theirs = run_executorch_calls(pte, calls)
    with torch.no_grad():
        for call, on_executorch in zip(calls, theirs):
            expected = model(*map(torch.from_numpy, call)).numpy()
            np.testing.assert_allclose(method.execute(call)[0], expected, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(on_executorch[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("spec", ["8", "3,0", "8,-1", "a,b", "8,0,1"])
def test_bad_embedding_quantize_specs_are_refused(spec):
    with pytest.raises(InvalidInputError, match="embedding_quantize"):
        parse_embedding_quantize(spec)


def test_a_group_that_does_not_divide_the_width_is_refused():
    with pytest.raises(InvalidInputError, match="groups of 24"):
        QuantizedEmbedding(torch.zeros(4, 64), 8, 24)
