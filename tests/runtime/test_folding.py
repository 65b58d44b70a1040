"""Load-time folding: constant-only kernels run once at load, except where a planned view reads their result."""

from __future__ import annotations

import torch
import torch.nn as nn

from edgetorch.runtime import Runtime
from tests.oracle import assert_close, eager, executorch_pte


class TwoLinears(nn.Module):
    """Each linear's weight transpose reads only a constant; the reshape between them is a planned view."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 12), nn.Linear(6, 4)

    def forward(self, x):
        return self.b(self.a(x).view(-1, 6))


class ViewOfConstantResult(nn.Module):
    """``scale * 2`` reads only a constant, and a planned view of it is read later: it must stay a step."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(2, 3))

    def forward(self, x):
        doubled = self.scale * 2
        return x + doubled.view(6) + doubled.sum()


def _load(model: nn.Module, args: tuple):
    return Runtime.get().load_program(executorch_pte(model, args)).load_method("forward")


def test_weight_transposes_fold_and_results_match():
    model, args = TwoLinears().eval(), (torch.randn(3, 8),)
    method = _load(model, args)
    assert method._executor.folded >= 2
    ops = [method._executor.describe(pc) for pc in method._executor.step_pcs]
    assert "aten::permute_copy.out" not in ops
    assert_close(method.execute([args[0].numpy()]), eager(model, args))


def test_view_of_constant_only_result_is_not_folded():
    model, args = ViewOfConstantResult().eval(), (torch.randn(6),)
    method = _load(model, args)
    for _ in range(2):  # a second run would read whatever later steps left in the view's memory
        assert_close(method.execute([args[0].numpy()]), eager(model, args))


class PositionsAndConcat(nn.Module):
    """``arange`` reads no tensor (it folds); ``cat`` reads a computed tensor through a list (it must not)."""

    def __init__(self):
        super().__init__()
        self.tail = nn.Parameter(torch.randn(2))

    def forward(self, x):
        return torch.cat([x + torch.arange(x.shape[0]), self.tail])


def test_kernels_without_tensor_inputs_fold_but_list_reads_count():
    model = PositionsAndConcat().eval()
    method = _load(model, (torch.randn(4),))
    ops = [method._executor.describe(pc) for pc in method._executor.step_pcs]
    assert "aten::arange.start_out" not in ops and "aten::cat.out" in ops
    for _ in range(2):
        x = torch.randn(4)
        assert_close(method.execute([x.numpy()]), eager(model, (x,)))
