"""The signal-to-noise ratio."""

from __future__ import annotations

from typing import Any

from edgetorch.devtools.inspector._inspector_utils import _snr, convert_to_float_tensor
from edgetorch.devtools.inspector.numerical_comparator.numerical_comparator_base import NumericalComparatorBase


class SNRComparator(NumericalComparatorBase):
    """Signal-to-noise ratio in dB: 10·log10(mean(a²) / mean((a−b)²)); infinite when they are equal."""

    def element_compare(self, a: Any, b: Any) -> float:
        x, y = convert_to_float_tensor(a), convert_to_float_tensor(b)
        try:
            return _snr(x, y)
        except RuntimeError as exc:
            raise ValueError(f"cannot take the SNR of shapes {list(x.shape)} and {list(y.shape)}: {exc}") from exc
