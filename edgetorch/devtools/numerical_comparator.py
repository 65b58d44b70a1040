"""The numerical comparators under their earlier edgetorch path; they live in
:mod:`edgetorch.devtools.inspector.numerical_comparator` (ExecuTorch's path)."""

from edgetorch.devtools.inspector.numerical_comparator import (
    L1Comparator,
    MSEComparator,
    NumericalComparatorBase,
    SNRComparator,
    comparator_for,
)

__all__ = ["L1Comparator", "MSEComparator", "NumericalComparatorBase", "SNRComparator", "comparator_for"]
