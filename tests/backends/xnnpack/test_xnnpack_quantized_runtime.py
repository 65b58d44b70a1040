"""ExecuTorch-written quantized XNNPACK programs on edgetorch's runtime: static int8 (QS8 activations,
per-channel QC8 weights, int32 bias), dynamic int8 (QD8 converts) and 4-bit blockwise (QB4W) linears,
compared with ExecuTorch's own runtime (in a subprocess) within one quantization step of the output."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.runtime import Runtime
from tests.interop.quantized_models import output_step, quantized, sqnr
from tests.oracle import eager, run_executorch

CASES = [
    ("mlp", "static"),
    ("cnn", "static"),
    pytest.param("res", "static", marks=pytest.mark.slow),  # a quantized add with a fused ReLU
    ("cnn", "dynamic"),
    ("mlp", "8da4w"),
    ("mlp", "8da8w"),
]


def executorch_xnnpack_pte(model: str, scheme: str):
    """(float model, inputs, program, .pte) quantized with ExecuTorch's quantizer and lowered by its partitioner."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as theirs
    from executorch.exir import to_edge_transform_and_lower

    pt2e = {"quantizer_cls": theirs.XNNPACKQuantizer, "config_fn": theirs.get_symmetric_quantization_config}
    fp32, args, ep = quantized(model, scheme, **(pt2e if scheme in ("static", "static_per_tensor", "dynamic") else {}))
    lowered = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    delegated = {str(n.target) for n in lowered.exported_program().graph.nodes if n.op == "call_function"}
    assert "executorch_call_delegate" in delegated and not any("quantize" in t for t in delegated)
    return fp32, args, ep, lowered.to_executorch().buffer


@pytest.mark.parametrize(("model", "scheme"), CASES)
def test_executorch_quantized_xnnpack_program_runs_on_edgetorch(model: str, scheme: str):
    fp32, args, ep, pte = executorch_xnnpack_pte(model, scheme)
    theirs = np.asarray(run_executorch(pte, list(args))[0])
    ours = Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])[0]
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=output_step(ep, theirs) * 1.001)
    # Both are the quantized model: close to its eager (reference q/dq) output and to the float model.
    assert sqnr(eager(ep.module(), args)[0], ours) > 25
    # Against the float model, no more than 0.5 dB below ExecuTorch (above 40 dB both are float noise).
    reference = eager(fp32, args)[0]
    assert sqnr(reference, ours) > min(sqnr(reference, theirs) - 0.5, 40)
