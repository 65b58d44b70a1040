"""PropagateDeviceConfig: which host/device copies :class:`PropagateDevicePass` leaves out.

A module of its own, with no operator registration, so that ``ExecutorchBackendConfig`` can name it. May
import torch (it does not need to).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PropagateDeviceConfig"]


@dataclass
class PropagateDeviceConfig:
    """Skip the copy of method inputs to the device (``skip_h2d_for_method_inputs``: the caller passes tensors
    already there) and of method outputs back to the host (``skip_d2h_for_method_outputs``: the next method reads
    them on the device). Either is a bool, or a dict of bools by method name. Both need
    ``ExecutorchBackendConfig(enable_non_cpu_memory_planning=True)``, and the runtime must not plan those inputs
    or outputs itself: pair them with ``MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)``.
    """

    skip_h2d_for_method_inputs: bool | dict[str, bool] = False
    skip_d2h_for_method_outputs: bool | dict[str, bool] = False

    def for_method(self, name: str | None) -> tuple[bool, bool]:
        """The two switches for method ``name`` (a dict without the method: False)."""

        def pick(value: bool | dict[str, bool]) -> bool:
            return bool(value.get(name, False)) if isinstance(value, dict) else bool(value)

        return pick(self.skip_h2d_for_method_inputs), pick(self.skip_d2h_for_method_outputs)

    def __hash__(self) -> int:
        return hash((repr(self.skip_h2d_for_method_inputs), repr(self.skip_d2h_for_method_outputs)))
