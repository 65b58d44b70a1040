"""The L1 distance: the sum of absolute differences."""

from __future__ import annotations

from typing import Any

from edgetorch.devtools.inspector._inspector_utils import convert_to_float_tensor
from edgetorch.devtools.inspector.numerical_comparator.numerical_comparator_base import NumericalComparatorBase


class L1Comparator(NumericalComparatorBase):
    """Sum of absolute differences (float64)."""

    def element_compare(self, a: Any, b: Any) -> float:
        x, y = convert_to_float_tensor(a), convert_to_float_tensor(b)
        try:
            return float((x - y).abs().sum())
        except RuntimeError as exc:
            raise ValueError(
                f"cannot take the L1 distance of shapes {list(x.shape)} and {list(y.shape)}: {exc}"
            ) from exc
