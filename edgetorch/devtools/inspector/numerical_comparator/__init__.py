"""Distances between an eager (AOT) intermediate output and the runtime's, laid out as ExecuTorch's
``executorch.devtools.inspector.numerical_comparator`` package: what ``Inspector.calculate_numeric_gap`` reports.
"""

from collections.abc import Callable
from typing import Any

from edgetorch.devtools.inspector._inspector_utils import DebugHandle
from edgetorch.devtools.inspector.numerical_comparator.l1_numerical_comparator import L1Comparator
from edgetorch.devtools.inspector.numerical_comparator.mse_numerical_comparator import MSEComparator
from edgetorch.devtools.inspector.numerical_comparator.numerical_comparator_base import (
    IntermediateOutputMapping,
    NumericalComparatorBase,
)
from edgetorch.devtools.inspector.numerical_comparator.snr_numerical_comparator import SNRComparator


def comparator_for(distance: str | NumericalComparatorBase, inspector: Any = None) -> NumericalComparatorBase:
    """The comparator named ``distance`` (``"MSE"``, ``"L1"``, ``"SNR"``, any case), or ``distance`` itself; either
    way bound to ``inspector`` unless it already has one."""
    if isinstance(distance, NumericalComparatorBase):
        if distance.inspector is None:
            distance.inspector = inspector
        return distance
    by_name: dict[str, Callable[..., NumericalComparatorBase]] = {
        "MSE": MSEComparator,
        "L1": L1Comparator,
        "SNR": SNRComparator,
    }
    cls = by_name.get(str(distance).strip().upper())
    if cls is None:
        raise ValueError(f"Unsupported distance metric {distance!r}; use one of {sorted(by_name)} or a comparator")
    return cls(inspector=inspector)


__all__ = [
    "DebugHandle",
    "IntermediateOutputMapping",
    "L1Comparator",
    "MSEComparator",
    "NumericalComparatorBase",
    "SNRComparator",
    "comparator_for",
]
