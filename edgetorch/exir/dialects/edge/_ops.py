"""Edge-dialect op objects at ExecuTorch's path; they live in :mod:`edgetorch.exir.dialects._ops`.

Edge graph targets report this module as theirs, so a printed node reads
``edgetorch.exir.dialects.edge._ops.aten.add.Tensor``.
"""

from edgetorch.exir.dialects._ops import EdgeOpOverload, EdgeOpOverloadPacket, edge_op, to_aten
from edgetorch.exir.dialects.dtype_constraints import (
    AllowedDtypeSet,
    EdgeArgument,
    EdgeFunctionSchema,
    FunctionDtypeConstraint,
    _edge_dialect_info,
)

__all__ = [
    "AllowedDtypeSet",
    "EdgeArgument",
    "EdgeFunctionSchema",
    "EdgeOpOverload",
    "EdgeOpOverloadPacket",
    "FunctionDtypeConstraint",
    "_edge_dialect_info",
    "edge_op",
    "to_aten",
]
