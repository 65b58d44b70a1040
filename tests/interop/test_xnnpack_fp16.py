"""float16 models on XNNPACK, both ways against ExecuTorch 1.5.1 (issue 28).

ExecuTorch's default ``XnnpackPartitioner`` delegates a float16 graph and writes its values and constants
with XNNPACK's fp16 datatype. Ours does the same: the program we lower runs on ExecuTorch's runtime, the
program ExecuTorch lowers runs on ours, each close to the eager float16 model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.backends.xnnpack import schema as xs
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime
from tests.backends.xnnpack.test_xnnpack_lowering import delegate_graphs
from tests.oracle import run_executorch

pytest.importorskip("executorch")

TOLERANCE = 2e-2  # float16 keeps ~3 decimal digits; these outputs are O(1)


class Half(nn.Module):
    """A convolution with a fused ReLU, a residual add, a global mean, a linear layer and a softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)
        self.linear = nn.Linear(3, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x)) + x
        return torch.softmax(self.linear(y.mean((2, 3))), -1)


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    model, x = Half().eval().half(), torch.randn(2, 3, 6, 6).half()
    with torch.no_grad():
        want = model(x).float().numpy()
    return model, x, want


def ours(pte: bytes, x: torch.Tensor) -> np.ndarray:
    return Runtime.get().load_program(pte).load_method("forward").execute([x.numpy()])[0]


def test_our_fp16_program_runs_on_executorch(case):
    model, x, want = case
    lowered = to_edge_transform_and_lower(torch.export.export(model, (x,)), partitioner=[XnnpackPartitioner()])
    outside = [n for n in lowered.exported_program().graph.nodes if n.op == "call_function"]
    # The delegate call and its getitem: the whole model is delegated.
    assert [str(n.target) for n in outside] == ["executorch_call_delegate", "<built-in function getitem>"]
    pte = lowered.to_executorch().buffer
    (graph,) = delegate_graphs(pte)
    datatypes = {xs.tensor_value(v).datatype for v in graph.xvalues}
    assert datatypes == {xs.XNNDatatype.xnn_datatype_fp16}, datatypes
    got = ours(pte, x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=0, atol=TOLERANCE)
    theirs = np.asarray(run_executorch(pte, [x])[0], dtype=np.float32)
    np.testing.assert_allclose(theirs, want, rtol=0, atol=TOLERANCE)


def test_executorch_fp16_program_runs_on_edgetorch(case):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner as Theirs
    from executorch.exir import to_edge_transform_and_lower as their_lower

    model, x, want = case
    pte = their_lower(torch.export.export(model, (x,)), partitioner=[Theirs()]).to_executorch().buffer
    datatypes = {xs.tensor_value(v).datatype for graph in delegate_graphs(pte) for v in graph.xvalues}
    assert xs.XNNDatatype.xnn_datatype_fp16 in datatypes, datatypes
    np.testing.assert_allclose(ours(pte, x).astype(np.float32), want, rtol=0, atol=TOLERANCE)
