"""decode -> encode -> decode is the identity on real ExecuTorch programs, and re-encoded files still run there."""

import numpy as np
import pytest
import torch

from edgetorch.format.pte import load_pte, save_pte
from tests.oracle import executorch_pte, run_executorch


class Counter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return torch.relu(self.lin(x)) + self.count, x.sum()


class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.max_pool2d(self.conv(x), 2).flatten(1).softmax(-1)


@pytest.mark.parametrize("model,args", [(Counter(), (torch.randn(2, 4),)), (Conv(), (torch.randn(1, 3, 8, 8),))])
def test_roundtrip_equal_and_runs_in_executorch(model, args):
    original = executorch_pte(model, args)
    pte = load_pte(original)
    segments = [bytes(pte.segment(i)) for i in range(len(pte.program.segments))]
    reencoded = save_pte(pte.program, segments)
    again = load_pte(reencoded)
    assert again.program == pte.program
    assert [bytes(again.segment(i)) for i in range(len(segments))] == segments
    want = run_executorch(original, [a.numpy() for a in args])
    got = run_executorch(reencoded, [a.numpy() for a in args])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
