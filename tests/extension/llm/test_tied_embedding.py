"""A token table tied to the output projection, quantized (int8-dynamic, 8da4w): the embedding's table and the
delegated projection's weight are the same bytes, and the program stores them once (``share_identical_data``).
The shared program gives the same outputs as the unshared one on our runtime and on ExecuTorch's."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.errors import InvalidInputError
from edgetorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from edgetorch.extension.llm.embedding_quant import QuantizedEmbedding, tied_embedding
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime
from tests.oracle import run_executorch

VOCAB, DIM = 96, 64


class TiedLM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.mid = torch.nn.Linear(DIM, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mid(self.emb(idx))))


def _quantized(scheme: str, idx: torch.Tensor) -> tuple[torch.export.ExportedProgram, QuantizedEmbedding]:
    torch.manual_seed(0)
    model = TiedLM().eval()
    model.head.weight = torch.nn.Parameter(model.head.weight.detach().clone())  # untie; the tie is re-made below
    if scheme == "8da4w":
        from torchao.quantization.granularity import PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig, quantize_

        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
        quantize_(model, config, lambda m, fqn: isinstance(m, torch.nn.Linear))
        model.emb = tied_embedding(model.head)
        return torch.export.export(model, (idx,)), model.emb
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    config = get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True)
    model.emb = tied_embedding(model.head, config)
    prepared = prepare_pt2e(torch.export.export(model, (idx,)).module(), XNNPACKQuantizer().set_global(config))
    prepared(idx)
    return torch.export.export(convert_pt2e(prepared), (idx,)), model.emb


@pytest.mark.parametrize("scheme", ["int8-dynamic", "8da4w"])
def test_tied_table_is_stored_once_and_runs_the_same_on_both_runtimes(scheme):
    idx = torch.tensor([[3, 95, 0, 17, 17]])
    ep, table = _quantized(scheme, idx)
    lowered = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    files = {
        share: copy.deepcopy(lowered).to_executorch(ExecutorchBackendConfig(share_identical_data=share)).buffer
        for share in (True, False)
    }
    # The table's bytes are in the shared file once and in the unshared file twice.
    table_bytes = table.weight.numpy().tobytes()
    assert files[True].count(table_bytes) == 1
    assert files[False].count(table_bytes) == 2
    assert len(files[False]) - len(files[True]) >= len(table_bytes)
    # The projection's weight (named data) is a range of the constant segment.
    pte = load_pte(files[True])
    constants = pte.program.segments[pte.program.constant_segment.segment_index]
    views = [
        bytes(pte.segment(nd.segment_index))
        for nd in pte.program.named_data
        if constants.offset <= pte.program.segments[nd.segment_index].offset < constants.offset + constants.size
    ]
    assert table_bytes in views
    ours = {s: Runtime.get().load_program(f).load_method("forward").execute([idx.numpy()])[0] for s, f in files.items()}
    np.testing.assert_array_equal(ours[True], ours[False])
    theirs = {s: np.asarray(run_executorch(f, [idx])[0]) for s, f in files.items()}
    np.testing.assert_array_equal(theirs[True], theirs[False])
    # Dynamic quantization: both runtimes round the activations alike; allow a float32 rounding's worth.
    np.testing.assert_allclose(ours[True], theirs[True], rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the quantized graph in eager: within its activations' rounding (a few %)
        expected = ep.module()(idx).numpy()
    assert np.linalg.norm(ours[True] - expected) <= 0.03 * np.linalg.norm(expected)


def test_low_nibble_first_table_reads_the_same_rows():
    """The XNNPACK-packed 4-bit table (pairs swapped by the op, swapped back) equals the op's own packing."""
    generator = torch.Generator().manual_seed(1)
    values = torch.randint(-8, 8, (10, 32), generator=generator, dtype=torch.int8)
    scales = torch.rand(10, 2, generator=generator) + 0.1
    plain = QuantizedEmbedding.from_quantized(values, scales, 4)
    packed = QuantizedEmbedding.from_quantized(values, scales, 4, low_nibble_first=True)
    assert not torch.equal(plain.weight, packed.weight)
    assert torch.equal(packed.weight & 15, (values[:, 0::2] + 8).to(torch.uint8))
    indices = torch.tensor([[0, 9, 4, 4]])
    torch.testing.assert_close(packed(indices), plain(indices), rtol=0, atol=0)
    torch.testing.assert_close(
        plain(indices)[0], values[indices[0]].float() * scales[indices[0]].repeat_interleave(16, 1)
    )


def test_tied_embedding_needs_a_quantized_weight_or_a_config():
    with pytest.raises(InvalidInputError, match="quantize_"):
        tied_embedding(torch.nn.Linear(8, 4))
    with pytest.raises(InvalidInputError, match="lie in"):
        QuantizedEmbedding.from_quantized(torch.full((2, 4), 9), torch.ones(2), 4)
