"""Non-delegated quantized programs both ways: edgetorch-written ones on ExecuTorch, ExecuTorch-written ones on ours.

PT2E (our XNNPACKQuantizer, static and dynamic per-channel) and torchao ``quantize_``
(8da4w, 8da8w, 4/8-bit embeddings) programs; outputs agree within one quantization
step of the output (in practice to float rounding: both runtimes run the same ops).
"""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime
from tests.interop.quantized_models import output_step, quantized, sqnr
from tests.oracle import eager, run_executorch

CASES = [
    ("mlp", "static"),
    ("cnn", "static"),
    ("mlp", "dynamic"),
    ("mlp", "8da4w_g128"),
    ("tokens", "embedding4"),
    ("tokens", "embedding8"),
]
# Also pass, left out to keep the file fast: ("mlp", "8da4w"), ("mlp", "8da8w").
# Lowest SQNR (dB) of the quantized program's output against the float model's.
MIN_SQNR = {"static": 30, "dynamic": 30, "8da8w": 30, "embedding8": 30, "8da4w": 12, "8da4w_g128": 12, "embedding4": 15}


def _run(pte: bytes, args: tuple) -> np.ndarray:
    return Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])[0]


@pytest.mark.parametrize(("model", "scheme"), CASES)
def test_edgetorch_quantized_program_runs_on_executorch(model: str, scheme: str):
    fp32, args, ep = quantized(model, scheme)
    want = eager(ep.module(), args)[0]
    pte = to_edge(ep).to_executorch().buffer
    ours = _run(pte, args)
    theirs = np.asarray(run_executorch(pte, list(args))[0])
    step = output_step(ep, want)
    np.testing.assert_allclose(ours, want, rtol=0, atol=step)
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=step)
    assert sqnr(eager(fp32, args)[0], ours) > MIN_SQNR[scheme]


@pytest.mark.parametrize(("model", "scheme"), [("cnn", "static"), ("mlp", "dynamic")])
def test_executorch_quantized_program_runs_on_edgetorch(model: str, scheme: str):
    import executorch.exir as et
    import executorch.kernels.quantized  # noqa: F401  (registers the quantized out variants ExecuTorch lowers to)
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer as theirs

    _, args, ep = quantized(model, scheme, theirs.XNNPACKQuantizer, theirs.get_symmetric_quantization_config)
    want = eager(ep.module(), args)[0]
    pte = et.to_edge(ep).to_executorch().buffer
    np.testing.assert_allclose(_run(pte, args), want, rtol=0, atol=output_step(ep, want))
