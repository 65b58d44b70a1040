"""The typed errors every part of edgetorch raises, and ExecuTorch's runtime error codes. Standard library only.

A runtime error carries the code ExecuTorch's runtime returns for the same
failure (``Error``, with ExecuTorch's numbers) and shows it in its message as
ExecuTorch does (``error 0x12``), so that ExecuTorch's troubleshooting pages
apply; it is a ``RuntimeError``, as ExecuTorch's Python API raises, and keeps
the builtin base it had (``ValueError`` for bad input) for code that catches that.
"""

from __future__ import annotations

import enum
from typing import Any


class Error(enum.IntEnum):
    """ExecuTorch's ``executorch::runtime::Error`` codes."""

    Ok = 0x00
    Internal = 0x01
    InvalidState = 0x02
    EndOfMethod = 0x03
    AlreadyLoaded = 0x04
    NotSupported = 0x10
    NotImplemented = 0x11
    InvalidArgument = 0x12
    InvalidType = 0x13
    OperatorMissing = 0x14
    RegistrationExceedingMaxKernels = 0x15
    RegistrationAlreadyRegistered = 0x16
    NotFound = 0x20
    MemoryAllocationFailed = 0x21
    AccessFailed = 0x22
    InvalidProgram = 0x23
    InvalidExternalData = 0x24
    OutOfResources = 0x25
    DelegateInvalidCompatibility = 0x30
    DelegateMemoryAllocationFailed = 0x31
    DelegateInvalidHandle = 0x32


class EdgetorchError(Exception):
    """Base of every error edgetorch raises on purpose. ``code`` is the ExecuTorch error code of a runtime error
    (None for compile-time errors); ``code=`` overrides a class's code for one failure."""

    code: Error | None = None

    def __init__(self, *args: Any, code: Error | None = None) -> None:
        super().__init__(*args)
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        message = BaseException.__str__(self)  # not KeyError's, which quotes the message
        code = self.code
        return message if code is None else f"{message} [error 0x{int(code):02x} {code.name}]"


class ProgramLoadError(EdgetorchError, RuntimeError):
    """A file or buffer is not a loadable program (not a .pte, truncated, corrupt, unsupported version)."""

    code = Error.InvalidProgram


class InvalidInputError(EdgetorchError, ValueError, RuntimeError):
    """The inputs given to a method do not match what the method expects (a shape beyond its bound is
    ``NotSupported``, as in ExecuTorch)."""

    code = Error.InvalidArgument


class NoSuchEntryError(InvalidInputError, IndexError):
    """An index beyond a program's methods, a method's inputs, outputs or attributes (an ``IndexError``, and a
    ``RuntimeError`` as ExecuTorch's pybindings raise for a method index)."""


class MethodNotFoundError(InvalidInputError, KeyError):
    """A program has no method of the name asked for (a ``KeyError``, as ExecuTorch's ``Program.load_method``)."""


class UnsupportedOperatorError(EdgetorchError, RuntimeError):
    """A program needs an operator with no kernel in this runtime (or no out variant in the compiler)."""

    code = Error.OperatorMissing


class UnsupportedBackendError(EdgetorchError, RuntimeError):
    """A program delegates to a backend that is not registered in this runtime."""

    code = Error.NotFound


class DelegateLoadError(EdgetorchError, RuntimeError):
    """A backend could not initialise a delegate blob (a node or feature it does not support)."""

    code = Error.DelegateInvalidCompatibility


class InvalidArgumentError(EdgetorchError, ValueError):
    """A kernel was called with an argument value it cannot take (an unknown mode, sizes that do not agree, a
    result beyond its planned bound); ExecuTorch's ``InvalidArgument``. Inside a method it reaches the caller as
    the cause of an :class:`ExecutionError`."""

    code = Error.InvalidArgument


class OutOfRangeError(InvalidArgumentError, IndexError):
    """A dimension or an index lies outside the range its tensor allows."""


class ExecutionError(EdgetorchError, RuntimeError):
    """A kernel or delegate failed while a method ran; the message names the instruction and operator.

    ``instruction`` is the failing instruction's index in the method's chain (None for a failure of the whole
    run, such as a runaway loop), ``operator`` its operator (``aten::sum.IntList_out``) or delegate, and
    ``__cause__`` the kernel's own error. Its code is the cause's code, else ``InvalidArgument`` for a
    ``ValueError`` (NumPy refusing the operands' shapes), else ``Internal``.
    """

    def __init__(self, message: str, instruction: int | None = None, operator: str | None = None):
        super().__init__(message)
        self.instruction = instruction
        self.operator = operator

    @property
    def code(self) -> Error:  # type: ignore[override]  # read-only here: the cause decides it
        cause = self.__cause__
        if getattr(cause, "code", None) is None and isinstance(cause, ValueError):
            return Error.InvalidArgument  # NumPy refusing the kernel's operands (shapes that do not broadcast)
        return getattr(cause, "code", None) or Error.Internal
