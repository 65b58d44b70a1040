"""The compiler's user-error type, at ExecuTorch's path: ``ExportError`` carries an ``ExportErrorType``.

``ExportError`` is for mistakes in the user's model or in how an API is called (an
unsupported input type, a broken assumption); ``InternalError`` for a broken invariant of
the compiler itself. Both are edgetorch errors, so ``except EdgetorchError`` catches them.
May import only edgetorch.errors.
"""

from __future__ import annotations

from enum import Enum

from edgetorch.errors import EdgetorchError

__all__ = ["ExportError", "ExportErrorType", "InternalError", "internal_assert"]


class ExportErrorType(Enum):
    """What kind of user mistake an ExportError reports (ExecuTorch's codes, same values)."""

    INVALID_INPUT_TYPE = 1
    """An input of a type the tracer or API does not take."""
    INVALID_OUTPUT_TYPE = 2
    """A model returning a type programs cannot hold."""
    VIOLATION_OF_SPEC = 3
    """Code that breaks one of the compiler's stated assumptions."""
    NOT_SUPPORTED = 4
    """A feature or type that is not supported."""
    MISSING_PROPERTY = 5
    """A detail the compiler needs (an annotation, a decorator) is missing."""
    UNINITIALIZED = 6
    """An API used before the step that initialises it."""


class ExportError(EdgetorchError):
    """A user error; the message starts with its ``[ExportErrorType.X]`` code."""

    def __init__(self, error_code: ExportErrorType, message: str) -> None:
        super().__init__(f"[{error_code}]: {message}")
        self.error_code = error_code


class InternalError(EdgetorchError):
    """An invariant of the compiler does not hold: a bug to report, with this message."""


def internal_assert(pred: bool, assert_msg: str) -> None:
    """Raise InternalError(assert_msg) unless ``pred``; an ``assert`` that ``python -O`` keeps."""
    if not pred:
        raise InternalError(assert_msg)
