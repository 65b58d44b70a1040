"""What remains of ExecuTorch's legacy tracer that its users and tests still reach for: the decomposition
table ``to_edge`` lowers with. (The tracer itself, ``exir.capture`` over TorchDynamo, is gone from ExecuTorch's
documented flow; ``torch.export`` replaced it; ``exir.capture`` here is a thin wrapper over ``torch.export``.) May import torch only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import get_decompositions

from edgetorch.exir.passes.decompose import core_aten_decompositions

__all__ = ["_default_decomposition_table"]


def _default_decomposition_table(
    _use_old_decomp_table: bool = False,
) -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The decompositions ``to_edge`` applies (Core ATen, the Edge extras, the quantized ops kept whole), as a
    fresh dict a caller may edit, e.g. pop a partitioner's ``ops_to_not_decompose`` before
    ``ExportedProgram.run_decompositions``. ``_use_old_decomp_table``: the short table of the old capture
    path (log_sigmoid_forward, ones, arange, transpose) instead."""
    if _use_old_decomp_table:
        aten = torch.ops.aten
        return get_decompositions(
            [aten.log_sigmoid_forward, aten.ones, aten.arange.default, aten.arange.start, aten.transpose]
        )
    return dict(core_aten_decompositions())
