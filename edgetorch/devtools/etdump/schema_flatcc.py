"""The ETDump schema (``etdump_schema_flatcc.fbs``) as dataclasses, under ExecuTorch's module path and names
(``executorch.devtools.etdump.schema_flatcc``); they are :mod:`edgetorch.format.etdump`'s. Torch-free.
"""

from __future__ import annotations

import enum

from edgetorch.format.etdump import (
    AllocationEvent,
    Allocator,
    Bool,
    DebugEvent,
    Double,
    ETDump,
    Event,
    Float,
    Int,
    ProfileEvent,
    RunData,
    Tensor,
    TensorList,
    Value,
    ValueType,
)
from edgetorch.format.program import Null, ScalarType, String

# ExecuTorch's name for the root table.
ETDumpFlatCC = ETDump


class PROFILE_EVENT_ENUM(enum.Enum):  # noqa: N801  (ExecuTorch's name)
    """The names the runtime gives its own profile events."""

    RUN_MODEL = "Method::execute"
    OPERATOR_CALL = "OPERATOR_CALL"
    DELEGATE_CALL = "DELEGATE_CALL"
    LOAD_MODEL = "Program::load_method"


__all__ = [
    "PROFILE_EVENT_ENUM",
    "AllocationEvent",
    "Allocator",
    "Bool",
    "DebugEvent",
    "Double",
    "ETDumpFlatCC",
    "Event",
    "Float",
    "Int",
    "Null",
    "ProfileEvent",
    "RunData",
    "ScalarType",
    "String",
    "Tensor",
    "TensorList",
    "Value",
    "ValueType",
]
