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


class ExecutionError(EdgetorchError, RuntimeError):
    """A kernel or delegate failed while a method ran; the message names the instruction and operator."""
