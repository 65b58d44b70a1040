"""Small models the devtools tests share."""

from __future__ import annotations

import torch


class TinyNet(torch.nn.Module):
    """The spec's TinyNet: conv -> batch norm -> relu -> pool -> flatten -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.bn = torch.nn.BatchNorm2d(8)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(torch.relu(self.bn(self.conv(x)))), 1))


class Mixed(torch.nn.Module):
    """Decomposed ops (linear), a scalar constant and a reduction: handles shared and not."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * 2 + x.sum()


def tinynet() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return TinyNet().eval(), (torch.randn(1, 3, 16, 16),)


def mixed() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Mixed().eval(), (torch.randn(2, 4),)
