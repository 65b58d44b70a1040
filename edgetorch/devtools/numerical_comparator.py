"""Distances between an eager (AOT) output and a runtime output, as ExecuTorch's Inspector names them."""

from __future__ import annotations

import abc
from typing import Any

import torch


class NumericalComparatorBase(abc.ABC):
    """``compare(a, b) -> float``: a is the reference (eager), b the runtime's value."""

    @abc.abstractmethod
    def compare(self, a: Any, b: Any) -> float: ...


def _floats(a: Any, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(a).double(), torch.as_tensor(b).double()


class L1Comparator(NumericalComparatorBase):
    """Sum of absolute differences."""

    def compare(self, a: Any, b: Any) -> float:
        x, y = _floats(a, b)
        return float((x - y).abs().sum())


class MSEComparator(NumericalComparatorBase):
    """Mean of squared differences."""

    def compare(self, a: Any, b: Any) -> float:
        x, y = _floats(a, b)
        return float(((x - y) ** 2).mean())


class SNRComparator(NumericalComparatorBase):
    """Signal-to-noise ratio in dB: 10·log10(mean(a²) / mean((a−b)²)); infinite when they are equal."""

    def compare(self, a: Any, b: Any) -> float:
        x, y = _floats(a, b)
        noise = float(((x - y) ** 2).mean())
        signal = float((x**2).mean())
        if noise == 0:
            return float("inf")
        return 10 * torch.log10(torch.tensor(signal / noise)).item()


_BY_NAME = {"MSE": MSEComparator, "L1": L1Comparator, "SNR": SNRComparator}


def comparator_for(distance: str | NumericalComparatorBase) -> NumericalComparatorBase:
    if isinstance(distance, NumericalComparatorBase):
        return distance
    cls = _BY_NAME.get(str(distance).strip().upper())
    if cls is None:
        raise ValueError(f"Unsupported distance metric {distance!r}; use one of {sorted(_BY_NAME)} or a comparator")
    return cls()
