"""Activations quantized to uint8 (QU8) and lowered by ExecuTorch's XNNPACK partitioner: ExecuTorch 1.5.1 writes
them as qint8 tensors with their uint8 zero points (here 141), which XNNPACK refuses, so its runtime fails to
load the program. Ours refuses it at load too, with a message that says what to change, instead of failing
at run time on a dtype cast. Our own lowering of the same graph runs on both runtimes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgetorch.errors import DelegateLoadError
from edgetorch.runtime import Runtime
from tests.interop.quantized_models import float_model
from tests.oracle import ExecuTorchCrashed, run_executorch


def _uint8_graph(ours: bool) -> tuple[torch.export.ExportedProgram, tuple]:
    """The MLP under PT2E with uint8 activations and per-channel int8 weights, by our quantizer or ExecuTorch's."""
    if ours:
        from edgetorch.backends.xnnpack.quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
        from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils import QuantizationConfig
    else:
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
            XNNPACKQuantizer,
            get_symmetric_quantization_config,
        )
        from executorch.backends.xnnpack.quantizer.xnnpack_quantizer_utils import QuantizationConfig
    from torchao.quantization.pt2e.observer import HistogramObserver
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer import QuantizationSpec

    base = get_symmetric_quantization_config(is_per_channel=True)
    act = QuantizationSpec(
        dtype=torch.uint8, quant_min=0, quant_max=255, qscheme=torch.per_tensor_affine, is_dynamic=False,
        observer_or_fake_quant_ctr=HistogramObserver.with_args(eps=2**-12),
    )  # fmt: skip
    model, args = float_model("mlp")
    prepared = prepare_pt2e(
        torch.export.export(copy.deepcopy(model), args).module(),
        XNNPACKQuantizer().set_global(QuantizationConfig(act, act, base.weight, base.bias)),
    )
    for _ in range(4):
        prepared(*args)
        prepared(torch.randn_like(args[0]))
    return torch.export.export(convert_pt2e(prepared), args), args


def test_a_uint8_activation_program_is_refused_at_load_by_both_runtimes():
    import executorch.kernels.quantized  # noqa: F401  the out variants of the q/dq ops left outside the blob
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep, args = _uint8_graph(ours=False)
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    with pytest.raises(DelegateLoadError, match=r"zero point \d+, outside \[-128, 127\].*quantize activations as int8"):
        Runtime.get().load_program(pte).load_method("forward")
    with pytest.raises(ExecuTorchCrashed, match="Failed to define tensor"):
        run_executorch(pte, list(args))


def test_our_lowering_of_uint8_activations_runs_on_both_runtimes():
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower

    ep, args = _uint8_graph(ours=True)
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    want = ep.module()(*args).detach().numpy()
    ours = Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])[0]
    np.testing.assert_allclose(ours, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.asarray(run_executorch(pte, list(args))[0]), ours, rtol=0, atol=1e-6)
