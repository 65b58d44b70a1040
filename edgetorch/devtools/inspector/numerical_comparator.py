"""Distances between an eager (AOT) intermediate output and the runtime's, as ExecuTorch's Inspector names them
(``executorch.devtools.inspector.numerical_comparator``): what ``Inspector.calculate_numeric_gap`` reports.
"""

from __future__ import annotations

from typing import Any

import torch

from edgetorch.devtools.inspector._inspector_utils import _snr

DebugHandle = tuple[int, ...]
# (AOT debug handles, AOT output) -> (runtime debug handles, runtime output), as ExecuTorch types the pairing.
IntermediateOutputMapping = dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]]


class NumericalComparatorBase:
    """A distance between a reference (eager) value ``a`` and a runtime value ``b``.

    Subclasses implement ``element_compare(a, b) -> float`` (ExecuTorch 1.5.1's name) or override
    ``compare(a, b)`` (its earlier one); the Inspector calls ``compare``.
    """

    def __init__(self, inspector: Any = None) -> None:
        self.inspector = inspector

    def element_compare(self, a: Any, b: Any) -> float:
        raise NotImplementedError(f"{type(self).__name__} must implement element_compare(a, b) -> float")

    def compare(self, a: Any, b: Any) -> float:
        return self.element_compare(a, b)


def _floats(a: Any, b: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.as_tensor(a).double(), torch.as_tensor(b).double()


class L1Comparator(NumericalComparatorBase):
    """Sum of absolute differences."""

    def element_compare(self, a: Any, b: Any) -> float:
        x, y = _floats(a, b)
        return float((x - y).abs().sum())


class MSEComparator(NumericalComparatorBase):
    """Mean of squared differences."""

    def element_compare(self, a: Any, b: Any) -> float:
        x, y = _floats(a, b)
        return float(((x - y) ** 2).mean())


class SNRComparator(NumericalComparatorBase):
    """Signal-to-noise ratio in dB: 10·log10(mean(a²) / mean((a−b)²)); infinite when they are equal."""

    def element_compare(self, a: Any, b: Any) -> float:
        return _snr(*_floats(a, b))


_BY_NAME = {"MSE": MSEComparator, "L1": L1Comparator, "SNR": SNRComparator}


def comparator_for(distance: str | NumericalComparatorBase) -> NumericalComparatorBase:
    """The comparator named ``distance`` (``"MSE"``, ``"L1"``, ``"SNR"``, any case), or ``distance`` itself."""
    if isinstance(distance, NumericalComparatorBase):
        return distance
    cls = _BY_NAME.get(str(distance).strip().upper())
    if cls is None:
        raise ValueError(f"Unsupported distance metric {distance!r}; use one of {sorted(_BY_NAME)} or a comparator")
    return cls()


__all__ = [
    "DebugHandle",
    "IntermediateOutputMapping",
    "L1Comparator",
    "MSEComparator",
    "NumericalComparatorBase",
    "SNRComparator",
]
