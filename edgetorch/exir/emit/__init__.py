"""Emission: planned execution-dialect methods -> one Program (ExecuTorch's ``exir.emit``).

:func:`emit_program` and :class:`EmitterOutput` live in :mod:`._emit_program`, as in ExecuTorch;
the per-method emitter (``MethodEmitter``) and the program-wide data it shares (``ProgramData``) too.
May import torch.
"""

from edgetorch.exir.emit._emit_program import (
    MEMORY_FORMATS,
    STATE_WRITES,
    EmitConfigError,
    EmitterOutput,
    MethodEmitter,
    ProgramData,
    emit_constant_method,
    emit_program,
    external_constants,
)

__all__ = [
    "MEMORY_FORMATS",
    "STATE_WRITES",
    "EmitConfigError",
    "EmitterOutput",
    "MethodEmitter",
    "ProgramData",
    "emit_constant_method",
    "emit_program",
    "external_constants",
]
