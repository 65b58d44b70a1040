"""The mean squared error."""

from __future__ import annotations

from typing import Any

from edgetorch.devtools.inspector._inspector_utils import _mse, convert_to_float_tensor
from edgetorch.devtools.inspector.numerical_comparator.numerical_comparator_base import NumericalComparatorBase


class MSEComparator(NumericalComparatorBase):
    """Mean of squared differences (float64)."""

    def element_compare(self, a: Any, b: Any) -> float:
        x, y = convert_to_float_tensor(a), convert_to_float_tensor(b)
        try:
            return _mse(x, y)
        except RuntimeError as exc:
            raise ValueError(f"cannot take the MSE of shapes {list(x.shape)} and {list(y.shape)}: {exc}") from exc
