"""find_divergence names the operator a planted wrong kernel breaks, with its source line."""

from __future__ import annotations

import numpy as np
import torch

from edgetorch.devtools.debug import find_divergence
from tests.devtools.helpers import leaky_relu, planted_kernel
from tests.devtools.models import tinynet


def test_clean_model_has_no_divergence_and_a_wrong_kernel_is_found():
    model, args = tinynet()
    ep = torch.export.export(model, args)
    clean = find_divergence(ep, args)
    assert clean.first is None and len(clean.rows) >= 4

    with planted_kernel("aten::relu.out", leaky_relu):
        report = find_divergence(ep, args)
    first = report.first
    assert first is not None and first.op_types == ["aten.relu.default"]
    assert "models.py" in first.source and "torch.relu" in first.source
    assert "first divergence" in str(report)


def test_quantized_model_matches_eager_and_a_truncating_quantize_kernel_is_found():
    """PT2E static int8 (our XNNPACKQuantizer), not delegated: the runtime's quantized kernels give eager's exact
    q/dq values; a quantize kernel that truncates instead of rounding is caught at the first quantize."""
    from tests.interop.quantized_models import quantized

    _, args, ep = quantized("mlp", "static")
    clean = find_divergence(ep, args)
    assert clean.first is None
    groups = [r for r in clean.rows if "quantized_decomposed.quantize_per_tensor.default" in r.op_types]
    assert len(groups) >= 3 and all(r.max_abs_diff == 0 for r in groups)  # int8 codes equal: dequantized equal

    def truncating_quantize(input, scale, zero_point, quant_min, quant_max, dtype, out):  # the planted bug
        np.copyto(out, np.clip(np.trunc(input / scale) + zero_point, quant_min, quant_max).astype(out.dtype))
        return out

    with planted_kernel("quantized_decomposed::quantize_per_tensor.out", truncating_quantize):
        report = find_divergence(ep, args)
    first = report.first
    assert first is not None and first.instruction == groups[0].instruction
    assert first.op_types[0] == "quantized_decomposed.quantize_per_tensor.default"
    assert "F.relu(self.fc1(x))" in first.source  # the model line that fed the first quantized linear
