"""The comparator contract: ``element_compare(a, b) -> float`` on one pair of values, and ``compare`` over the
Inspector's pairing of AOT and runtime intermediate outputs (after an optional ``preprocessing`` step, where a
backend can dequantize or change layout), giving one table row per pair.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any

from edgetorch.devtools.extras import require
from edgetorch.devtools.inspector._inspector_utils import DebugHandle, find_op_names

# (AOT debug handles, AOT output) -> (runtime debug handles, runtime output), as the Inspector pairs them.
IntermediateOutputMapping = dict[tuple[DebugHandle, Any], tuple[DebugHandle, Any]]


class NumericalComparatorBase(ABC):
    """A distance between a reference (eager) value ``a`` and a runtime value ``b``.

    Subclasses implement :meth:`element_compare`; they may override :meth:`preprocessing`. ``inspector`` is
    the Inspector that calls them (set by ``calculate_numeric_gap`` when not given), for preprocessing that
    needs the program.
    """

    def __init__(self, inspector: Any = None) -> None:
        self._inspector = inspector

    @property
    def inspector(self) -> Any:
        return self._inspector

    @inspector.setter
    def inspector(self, value: Any) -> None:
        self._inspector = value

    def preprocessing(self, mapping: IntermediateOutputMapping) -> IntermediateOutputMapping:
        """The pairs to compare, transformed (unchanged by default)."""
        return mapping

    @abstractmethod
    def element_compare(self, a: Any, b: Any) -> float:
        """The distance between one AOT value and one runtime value."""

    @staticmethod
    def _validate_preprocessing_output(processed_mapping: Any) -> None:
        """Raise unless ``preprocessing`` returned ``{(handles, value): (handles, value)}`` with int handles."""
        if not isinstance(processed_mapping, dict):
            raise TypeError(
                f"preprocessing() must return a dict, got {type(processed_mapping).__name__}; expected "
                "{(aot debug handles, aot output): (runtime debug handles, runtime output)}"
            )

        def check(pair: Any, side: str, whose: str) -> None:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ValueError(
                    f"Invalid {side} format in the preprocessed mapping: {pair!r}; expected a (debug handles, "
                    "output) pair"
                )
            handles = pair[0]
            if not isinstance(handles, tuple) or not all(isinstance(h, int) for h in handles):
                raise ValueError(f"Invalid {whose} debug handle {handles!r} in a {side}: expected a tuple of ints")

        for key, value in processed_mapping.items():
            check(key, "key", "AOT")
            check(value, "value", "runtime")

    def _compare_intermediate_outputs(self, a: Any, b: Any) -> list[float]:
        """One distance per element when both are sequences (of the same length), else one distance."""
        a_seq, b_seq = isinstance(a, Sequence), isinstance(b, Sequence)
        if a_seq != b_seq:
            raise ValueError(
                f"cannot compare a {type(a).__name__} with a {type(b).__name__}: both must be sequences or neither"
            )
        if not a_seq:
            return [self.element_compare(a, b)]
        if len(a) != len(b):
            raise ValueError(f"cannot compare sequences of {len(a)} and {len(b)} values: expected equal lengths")
        return [self.element_compare(x, y) for x, y in zip(a, b)]

    def compare(
        self,
        mapping: IntermediateOutputMapping,
        aot_debug_handle_to_op_names: Mapping[DebugHandle, list[str]],
        runtime_debug_handle_to_op_names: Mapping[DebugHandle, list[str]],
    ) -> Any:
        """Preprocess, then compare each pair: a DataFrame (pandas) with ``aot_debug_handle``, ``aot_ops``,
        ``aot_intermediate_output``, ``runtime_ops``, ``runtime_debug_handle``, ``runtime_intermediate_output``
        and ``gap`` (a list of distances). Pairs with a missing value, or an AOT output of several tensors (an
        undecomposed ATen op such as ``unbind``, which the runtime never logs as one), are left out."""
        pd = require("pandas", "NumericalComparatorBase.compare")
        processed = self.preprocessing(mapping)
        self._validate_preprocessing_output(processed)
        rows = []
        for (aot_handle, aot_output), (runtime_handle, runtime_output) in processed.items():
            if aot_output is None or runtime_output is None:
                continue
            if isinstance(aot_output, Sequence) and len(aot_output) > 1:
                continue
            rows.append(
                {
                    "aot_debug_handle": aot_handle,
                    "aot_ops": find_op_names(aot_handle, aot_debug_handle_to_op_names),
                    "aot_intermediate_output": aot_output,
                    "runtime_ops": find_op_names(runtime_handle, runtime_debug_handle_to_op_names),
                    "runtime_debug_handle": runtime_handle,
                    "runtime_intermediate_output": runtime_output,
                    "gap": self._compare_intermediate_outputs(aot_output, runtime_output),
                }
            )
        return pd.DataFrame(rows)
