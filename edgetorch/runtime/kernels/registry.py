"""The kernel registry: operator name with overload (``"aten::add.out"``) -> NumPy function.

The calling convention, shared by every kernel:

* A KernelCall's arguments are the out-variant schema's arguments in order
  (every default filled in, the ``out`` tensors last), followed by the
  return values. A kernel takes exactly the schema's arguments as positional
  parameters; the executor counts them from the signature (or ``nargs``) and
  treats the remaining KernelCall arguments as the places its results go.
* Values arrive as: Tensor -> ``np.ndarray`` (a view of planned memory or of
  the file), Int -> ``int``, Double -> ``float``, Bool -> ``bool``, None ->
  ``None``, String -> ``str``, IntList -> ``list[int]``, DoubleList ->
  ``list[float]``, BoolList -> ``list[bool]``, TensorList -> ``list[ndarray]``,
  OptionalTensorList -> ``list[ndarray | None]``. ``dtype`` arguments are
  ScalarType codes (ints); :func:`edgetorch.runtime.dtypes.numpy_dtype` maps
  them.
* An ``out`` tensor arrives at its planned (upper-bound) shape. The kernel
  computes the true result shape, calls :func:`edgetorch.runtime.memory.resize`
  (a no-op when it already matches), writes the result into it (``out=`` or
  ``np.copyto``), and returns it; a kernel with several outs (or a list of
  outs) returns a tuple (or the list) of every resized out. Scalar ops
  (``executorch_prim``) return a Python number. A kernel that resizes one of
  its arguments in place and has no result value (``et_copy_index``) names
  that argument's position in a ``resizes_arg`` attribute and returns it.
* Kernels never allocate per element in Python; they are vectorised NumPy.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from edgetorch.errors import OutOfRangeError, UnsupportedOperatorError

KERNELS: dict[str, tuple[Callable, int]] = {}


def register_kernel(name: str, fn: Callable, nargs: int | None = None) -> Callable:
    """Register ``fn`` as the kernel for ``name`` ("namespace::op.overload").

    ``nargs`` is the number of schema arguments (outs included); by default it is
    the number of positional parameters of ``fn``.
    """
    if "::" not in name:
        raise ValueError(f"kernel name must look like 'namespace::op.overload', got {name!r}")
    if nargs is None:
        params = inspect.signature(fn).parameters.values()
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            raise ValueError(f"kernel for {name!r} takes *args; pass nargs= to register_kernel")
        nargs = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    KERNELS[name] = (fn, nargs)
    return fn


def kernel(*names: str, nargs: int | None = None, impure: bool = False) -> Callable[[Callable], Callable]:
    """Decorator form of :func:`register_kernel` for one or more overload names.

    ``impure`` marks kernels whose result is not a function of their inputs (random
    numbers); the executor never precomputes those at load time.
    """

    def wrap(fn: Callable) -> Callable:
        if impure:
            fn.impure = True  # type: ignore[attr-defined]  # mypy does not model attributes set on functions
        for name in names:
            register_kernel(name, fn, nargs)
        return fn

    return wrap


def lookup(name: str) -> tuple[Callable, int]:
    """The kernel and its argument count for ``name``, or UnsupportedOperatorError."""
    try:
        return KERNELS[name]
    except KeyError:
        raise UnsupportedOperatorError(
            f"no kernel for operator {name!r}; register one with "
            f"edgetorch.runtime.register_kernel({name!r}, fn) before loading the method"
        ) from None


def wrap_dim(dim: int, ndim: int) -> int:
    """``dim`` as a non-negative axis of an ``ndim``-D tensor (a 0-D tensor accepts 0 and -1, like torch).

    Every kernel family checks its ``dim`` arguments here, so a bad dim is the same error everywhere.
    """
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise OutOfRangeError(
            f"dimension {dim} is out of range for a {ndim}-D tensor; expected a dim in [{-rank}, {rank - 1}]"
        )
    return dim % rank
