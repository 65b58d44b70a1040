"""Static int8 XNNPACK programs whose weights have one scale per tensor (PT2E with
``get_symmetric_quantization_config(is_per_channel=False)``), both ways against ExecuTorch 1.5.1.

Such a linear or convolution reads QS8 weights (``xnn_datatype_qint8``, zero point 0) and an
int32 bias quantized per tensor (``xnn_datatype_qint32``, scale input_scale * weight_scale).
Our lowering writes the blob ExecuTorch's does (same nodes, values and constant bytes); ExecuTorch's
runtime runs ours and ours runs ExecuTorch's, within one quantization step of the output of each
other and of the eager (reference q/dq) model, with the same result with and without the compiled tier.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.runtime import Runtime, policy
from tests.backends.xnnpack.test_xnnpack_lowering import delegate_graphs
from tests.backends.xnnpack.test_xnnpack_quantized_lowering import _signature, lowered
from tests.backends.xnnpack.test_xnnpack_quantized_runtime import executorch_xnnpack_pte
from tests.interop.quantized_models import output_step, sqnr
from tests.oracle import eager, run_executorch

pytest.importorskip("executorch")

SCHEME = "static_per_tensor"
# The MLP (linear + ReLU twice, then a linear) and the CNN (convolutions, a residual add, global average
# pooling, a linear) run by default; a depthwise convolution with pooling, mul and cat, and a residual add
# carrying a ReLU, with --slow (lowering with ExecuTorch costs 20-40 s a model).
MODELS = ["mlp", "cnn", pytest.param("ops", marks=pytest.mark.slow), pytest.param("res", marks=pytest.mark.slow)]


@functools.cache
def executorch_lowered(model: str):
    """(float model, inputs, program, .pte) quantized with ExecuTorch's quantizer and lowered by its partitioner."""
    return executorch_xnnpack_pte(model, SCHEME)


def run_ours(pte: bytes, args: tuple) -> np.ndarray:
    return Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])[0]


@pytest.mark.parametrize("model", MODELS)
def test_our_per_tensor_program_runs_on_executorch(model: str):
    fp32, args, ep, low, pte = lowered(model, SCHEME)
    # Every q/dq is inside the delegate, whose only input is the model's: weights left outside reached
    # ExecuTorch's XNNPACK as float inputs of a fully connected, and its runtime crashed (SIGSEGV).
    outside = [str(n.target) for n in low.exported_program().graph.nodes if n.op == "call_function"]
    assert not [t for t in outside if "quantize" in t], outside
    (graph,) = delegate_graphs(pte)
    assert len(graph.input_ids) == len(args)
    want = eager(ep.module(), args)[0]
    step = output_step(ep, want)
    ours = run_ours(pte, args)
    theirs = np.asarray(run_executorch(pte, list(args))[0])
    np.testing.assert_allclose(ours, want, rtol=0, atol=step * 1.001)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=step * 1.001)
    assert sqnr(eager(fp32, args)[0], ours) > 30


@pytest.mark.parametrize("model", MODELS)
def test_executorch_per_tensor_program_runs_on_edgetorch(model: str):
    fp32, args, ep, pte = executorch_lowered(model)
    kinds = {xs.tensor_value(v).datatype for g in delegate_graphs(pte) for v in g.xvalues}
    assert xs.XNNDatatype.xnn_datatype_qint32 in kinds  # the per-tensor bias our runtime once refused
    theirs = np.asarray(run_executorch(pte, list(args))[0])
    ours = run_ours(pte, args)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=output_step(ep, theirs) * 1.001)
    reference = eager(fp32, args)[0]
    assert sqnr(reference, ours) > min(sqnr(reference, theirs) - 1, 40)


def _named_keys(pte: bytes) -> list[str]:
    """The named-data keys of the delegates' constants: SHA-256s of their bytes (integers and scales)."""
    return sorted(c.named_key for g in delegate_graphs(pte) for c in g.constant_data if c.named_key)


@pytest.mark.parametrize("model", MODELS)
def test_blob_matches_executorchs(model: str):
    *_, ours = lowered(model, SCHEME)
    *_, theirs = executorch_lowered(model)
    assert [_signature(g) for g in delegate_graphs(ours)] == [_signature(g) for g in delegate_graphs(theirs)]
    assert _named_keys(ours) == _named_keys(theirs)


@pytest.mark.skipif(not policy.compiled_tier(), reason="numba is not installed (pip install edgetorch[fast])")
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("writer", ["edgetorch", "executorch"])
def test_both_tiers_give_the_same_result(model: str, writer: str, monkeypatch, set_policy):
    if writer == "edgetorch":
        _, args, _, _, pte = lowered(model, SCHEME)
    else:
        _, args, _, pte = executorch_lowered(model)
    outputs = []
    for tier in (True, False):
        set_policy(compiled=tier)
        outputs.append(run_ours(pte, args))
    np.testing.assert_array_equal(outputs[0], outputs[1])
