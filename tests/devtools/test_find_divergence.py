"""find_divergence names the operator a planted wrong kernel breaks, with its source line."""

from __future__ import annotations

import numpy as np
import torch

from edgetorch.devtools.debug import find_divergence
from edgetorch.runtime.kernels.registry import KERNELS, register_kernel
from tests.devtools.models import tinynet


def test_clean_model_has_no_divergence_and_a_wrong_kernel_is_found():
    model, args = tinynet()
    ep = torch.export.export(model, args)
    clean = find_divergence(ep, args)
    assert clean.first is None and len(clean.rows) >= 4

    original = KERNELS["aten::relu.out"]

    def leaky_relu(x, out):  # the planted bug: lets negatives through at 1%
        np.multiply(x, np.where(x > 0, 1.0, 0.01).astype(x.dtype), out=out)
        return out

    register_kernel("aten::relu.out", leaky_relu)
    try:
        report = find_divergence(ep, args)
    finally:
        KERNELS["aten::relu.out"] = original
    first = report.first
    assert first is not None and first.op_types == ["aten.relu.default"]
    assert "models.py" in first.source and "torch.relu" in first.source
    assert "first divergence" in str(report)
