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

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, MutableMapping
from types import FrameType

from edgetorch.errors import OutOfRangeError, UnsupportedOperatorError

Kernel = tuple[Callable, int]

_PACKAGE = __name__.rpartition(".")[0]


class KernelTable(MutableMapping[str, Kernel]):
    """Operator name -> (kernel, argument count), importing kernel families only when asked for.

    ``_index.FAMILIES`` (generated, checked by a test) says which family module registers each
    portable operator. Looking an operator up imports just its family, so loading a program imports
    the families it uses and nothing else; listing or counting the table imports them all.
    """

    def __init__(self) -> None:
        self._kernels: dict[str, Kernel] = {}
        self.origin: dict[str, str] = {}  # operator -> module that registered it

    def _load_family_of(self, name: str) -> None:
        family = _families().get(name)
        if family is not None:
            importlib.import_module(f"{_PACKAGE}.{family}")

    def __getitem__(self, name: str) -> Kernel:
        if name not in self._kernels:
            self._load_family_of(name)
        return self._kernels[name]

    def __contains__(self, name: object) -> bool:
        return name in self._kernels or (isinstance(name, str) and name in _families())

    def __setitem__(self, name: str, value: Kernel) -> None:
        self._kernels[name] = value

    def __delitem__(self, name: str) -> None:
        del self._kernels[name]

    def __iter__(self) -> Iterator[str]:
        load_all_families()
        return iter(list(self._kernels))

    def __len__(self) -> int:
        load_all_families()
        return len(self._kernels)


def _families() -> dict[str, str]:
    from edgetorch.runtime.kernels._index import FAMILIES

    return FAMILIES


def family_modules() -> list[str]:
    """Every kernel family module of the portable library (fully qualified names)."""
    return sorted({f"{_PACKAGE}.{f}" for f in _families().values()})


def load_all_families() -> None:
    """Import every kernel family, so that every portable kernel is registered."""
    for module in family_modules():
        importlib.import_module(module)


KERNELS = KernelTable()


def _registering_module() -> str:
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


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
    KERNELS.origin[name] = _registering_module()
    return fn


def kernel(
    *names: str, nargs: int | None = None, impure: bool = False, shape_only: bool = False
) -> Callable[[Callable], Callable]:
    """Decorator form of :func:`register_kernel` for one or more overload names.

    ``impure`` marks kernels whose result is not a function of their inputs (random
    numbers); the executor never precomputes those at load time. ``shape_only`` marks
    kernels that read only their tensor inputs' shapes and dtypes (``full_like``): with
    static shapes the executor computes them once, at load, whatever the inputs hold.
    """

    def wrap(fn: Callable) -> Callable:
        if impure:
            fn.impure = True  # type: ignore[attr-defined]  # mypy does not model attributes set on functions
        if shape_only:
            fn.shape_only = True  # type: ignore[attr-defined]
        for name in names:
            register_kernel(name, fn, nargs)
        return fn

    return wrap


def lookup(name: str) -> Kernel:
    """The kernel and its argument count for ``name`` (importing its family), or UnsupportedOperatorError."""
    try:
        return KERNELS[name]
    except KeyError:
        raise UnsupportedOperatorError(
            f"no kernel for operator {name!r}; register one with "
            f"edgetorch.runtime.register_kernel({name!r}, fn) before loading the method"
        ) from None


@functools.cache
def required_parameters(fn: Callable, nargs: int) -> tuple[tuple[int, str, str], ...]:
    """(position, name, what it needs) of each of the kernel's arguments that may not be None: annotated
    ``np.ndarray`` ("a tensor"), or an unannotated ``self`` or ``out`` (ATen never makes those optional), or
    annotated with any other type that admits no None (no ``None``, ``Optional`` or ``Any`` in it, no None
    default: an ``int`` dim, a ``list[int]`` size, a ``bool`` flag, a scalar). For ATen's operators these are the
    arguments its schemas do not make optional (tests/runtime/kernels/test_registry.py compares them). The
    executor refuses, at load, an instruction passing None there (a damaged program; ExecuTorch's kernels would
    abort on it)."""
    try:
        params = list(inspect.signature(fn).parameters.values())[:nargs]
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return ()
    found = []
    for i, p in enumerate(params):
        note = p.annotation
        text = note if isinstance(note, str) else getattr(note, "__qualname__", None) or str(note)
        if text in ("np.ndarray", "numpy.ndarray", "ndarray") or (note is p.empty and p.name in ("self", "out")):
            found.append((i, p.name, "a tensor"))
        elif note is not p.empty and p.default is not None and not any(w in text for w in ("None", "Optional", "Any")):
            found.append((i, p.name, f"a value of type {text}"))
    return tuple(found)


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
