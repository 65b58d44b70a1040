"""``DynamicMemoryPlanningMode``: how tensors with dynamic shapes get their planned sizes. Standard library only.

``UPPER_BOUND`` plans every dynamic dimension at the largest value its range allows;
``SYMBOLIC`` plans it at the example input's size (the hint), leaving the runtime to
resize within it. ``ExecutorchBackendConfig.dynamic_memory_planning_mode`` picks one.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["DynamicMemoryPlanningMode"]


class DynamicMemoryPlanningMode(IntEnum):
    UPPER_BOUND = 0
    SYMBOLIC = 1
