"""The typed errors every part of edgetorch raises. Torch-free; imports nothing."""


class EdgetorchError(Exception):
    """Base of every error edgetorch raises on purpose."""


class ProgramLoadError(EdgetorchError):
    """A file or buffer is not a loadable program (not a .pte, truncated, corrupt, unsupported version)."""


class InvalidInputError(EdgetorchError, ValueError):
    """The inputs given to a method do not match what the method expects."""


class UnsupportedOperatorError(EdgetorchError):
    """A program needs an operator with no kernel in this runtime (or no out variant in the compiler)."""


class UnsupportedBackendError(EdgetorchError):
    """A program delegates to a backend that is not registered in this runtime."""


class DelegateLoadError(EdgetorchError):
    """A backend could not initialise a delegate blob (a node or feature it does not support)."""


class InvalidArgumentError(EdgetorchError, ValueError):
    """A kernel was called with an argument value it cannot take (an unknown mode, sizes that do not agree, a
    result beyond its planned bound); ExecuTorch's ``InvalidArgument``. Inside a method it reaches the caller as
    the cause of an :class:`ExecutionError`."""


class OutOfRangeError(InvalidArgumentError, IndexError):
    """A dimension or an index lies outside the range its tensor allows."""


class ExecutionError(EdgetorchError, RuntimeError):
    """A kernel or delegate failed while a method ran; the message names the instruction and operator.

    ``instruction`` is the failing instruction's index in the method's chain (None for a failure of the whole
    run, such as a runaway loop), ``operator`` its operator (``aten::sum.IntList_out``) or delegate, and
    ``__cause__`` the kernel's own error.
    """

    def __init__(self, message: str, instruction: int | None = None, operator: str | None = None):
        super().__init__(message)
        self.instruction = instruction
        self.operator = operator
