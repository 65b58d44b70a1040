"""What the executor holds per value: a tensor's slot as the plan gives it, and list values read at run time.

Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TensorSlot:
    """What the plan says about one tensor value."""

    dtype: np.dtype
    sizes: tuple[int, ...]
    dim_order: list[int]
    dynamic: bool
    constant: bool


class ListRef:
    """A list value whose items are other values read at run time (symbolic ints, resized tensors)."""

    __slots__ = ("items", "none_for_negative")

    def __init__(self, items: list[int], none_for_negative: bool = False):
        self.items = items
        self.none_for_negative = none_for_negative

    def resolve(self, vals: list) -> list:
        if self.none_for_negative:
            return [None if i < 0 else vals[i] for i in self.items]
        return [vals[i] for i in self.items]
