"""Non-core ops that reach the runtime through a decomposition of ours (torch has none usable), run end to end."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from edgetorch.devtools.ops_coverage import EDGETORCH


def _run(module: torch.nn.Module, *inputs: torch.Tensor) -> list[torch.Tensor]:
    ep = torch.export.export(module, inputs, strict=False)
    return EDGETORCH.execute(EDGETORCH.load(EDGETORCH.lower(ep)), list(inputs))


class _RReLU(torch.nn.Module):
    def __init__(self, training: bool):
        super().__init__()
        self.training_mode = training

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rrelu(x, 0.1, 0.3, training=self.training_mode)


def test_rrelu_eval_is_leaky_relu_with_the_mean_slope():
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    (got,) = _run(_RReLU(False), x)
    torch.testing.assert_close(got, F.rrelu(x, 0.1, 0.3, training=False))


def test_rrelu_training_draws_slopes_within_bounds():
    x = -torch.rand(2000, generator=torch.Generator().manual_seed(0)) - 0.5
    (got,) = _run(_RReLU(True), x)
    slopes = got / x
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6
    assert abs(slopes.mean().item() - 0.2) < 0.01 and slopes.std() > 0.03


def test_batch_norm_with_update_is_decomposed():
    x = torch.randn(4, 3, 5, generator=torch.Generator().manual_seed(0))
    weight, bias, mean, var = torch.rand(3) + 0.5, torch.randn(3), torch.zeros(3), torch.ones(3)

    class BN(torch.nn.Module):
        def forward(self, x, weight, bias, mean, var):
            out, _, _, _ = torch.ops.aten._batch_norm_with_update(x, weight, bias, mean, var, 0.1, 1e-5)
            return out

    (got,) = _run(BN(), x, weight, bias, mean.clone(), var.clone())
    want = F.batch_norm(x, mean.clone(), var.clone(), weight, bias, training=True)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


class _Inv(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return torch.linalg.inv(a), torch.linalg.solve(a, b), torch.linalg.cholesky(a @ a.mT + torch.eye(3))


def test_checked_linalg_ops_lower_without_effect_tokens():
    a = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0)) + 3 * torch.eye(3)
    b = torch.randn(2, 3, 2, generator=torch.Generator().manual_seed(1))
    for got, want in zip(_run(_Inv(), a, b), _Inv()(a, b)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
