"""ExecuTorch-lowered 8da4w linears whose 4-bit weights have one scale per output channel (torchao ``PerAxis(0)``,
or a group as wide as the input) run on our runtime, close to torchao's eager model."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("executorch")


@pytest.mark.parametrize("granularity", ["per-axis", "group-of-K"])
def test_executorch_4bit_per_channel_linear_runs_on_edgetorch(granularity):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    from edgetorch.runtime import Runtime

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32)).eval()
    weights = PerAxis(0) if granularity == "per-axis" else PerGroup(64)
    quantize_(model, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=weights))
    x = torch.randn(3, 64)
    with torch.no_grad():
        expected = model(x).numpy()
    lowered = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    program = lowered.to_executorch()
    assert len(program.executorch_program.execution_plan[0].delegates) == 1  # the linear is in XNNPACK
    got = Runtime.get().load_program(program.buffer).load_method("forward").execute([x.numpy()])[0]
    # int8 activations: within a few activation steps of the eager model's fake-quantized arithmetic
    np.testing.assert_allclose(got, expected, atol=0.02 * float(np.abs(expected).max()))
