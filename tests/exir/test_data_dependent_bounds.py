"""Data-dependent output lengths get a plannable bound: masked_select's result is planned at its input's
numel (torch leaves the length unbounded), so combinations and boolean-mask selection lower and run; a length
that has no usable bound is a clear error naming the dimension."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.exir.passes.sym_shape_eval_pass import UNPLANNABLE, upper_bound
from edgetorch.runtime import Runtime


def run(module: torch.nn.Module, *args: torch.Tensor) -> list[np.ndarray]:
    pte = to_edge(torch.export.export(module, args)).to_executorch().buffer
    return Runtime.get().load_program(pte).load_method("forward").execute([a.numpy() for a in args])


class Combinations(torch.nn.Module):
    # r >= 2 does not export in torch 2.13 (PendingUnbackedSymbolNotFound in torch.export itself).
    def forward(self, x):
        return torch.combinations(x, r=1), torch.combinations(x, r=1, with_replacement=True)


class MaskedSelect(torch.nn.Module):
    def forward(self, x, mask):
        return torch.masked_select(x, mask) * 2


def test_combinations_lower_and_run():
    x = torch.randn(6, generator=torch.Generator().manual_seed(0))
    for got, want in zip(run(Combinations(), x), Combinations()(x)):
        np.testing.assert_array_equal(got, want.numpy())


@pytest.mark.parametrize("keep", [0.0, 0.5, 1.0])
def test_masked_select_is_planned_at_its_inputs_numel(keep):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 4, generator=g)
    mask = torch.rand(1, 4, generator=g) < keep  # broadcast against x: at most 12 elements
    (got,) = run(MaskedSelect(), x, mask)
    np.testing.assert_array_equal(got, MaskedSelect()(x, mask).numpy())


def test_an_unusable_bound_is_a_clear_error():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    n = env.create_unbacked_symint()
    torch._check(n <= UNPLANNABLE * 2)
    with pytest.raises(ValueError, match="no usable upper bound"):
        upper_bound(n)
