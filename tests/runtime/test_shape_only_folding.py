"""A kernel that reads only its input's shape (``full_like``, ``zeros_like``, ``ones_like``) runs once, at load,
in a static method: its result is the same whatever the input holds, and later runs do not recompute it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime


class Like(torch.nn.Module):
    def __init__(self, make):
        super().__init__()
        self.make = make

    def forward(self, x):
        return torch.where(x > 0, self.make(x), x * 3)


@pytest.mark.parametrize(
    "make",
    [lambda x: torch.full_like(x, 2.5), torch.zeros_like, torch.ones_like],
    ids=["full_like", "zeros_like", "ones_like"],
)
def test_shape_only_kernels_fold_at_load(make):
    model = Like(make).eval()
    x = torch.randn(3, 5)
    pte = to_edge(torch.export.export(model, (x,))).to_executorch().buffer
    method = Runtime.get().load_program(pte).load_method("forward")
    assert any(name.endswith("_like.out") for name in method.operators), method.operators
    assert method._executor.folded >= 1
    for seed in range(2):
        x = torch.randn(3, 5, generator=torch.Generator().manual_seed(seed))
        np.testing.assert_array_equal(method.execute([x.numpy()])[0], model(x).numpy())
