"""The checks a kernel makes on its arguments, for the load-time rewrites that stand in for it.

Direct ufunc binding and the fusions (static_fusion.py, fusion.py) and copy elision (copy_elision.py) replace
kernel calls with NumPy calls or views bound at load. Each calls these checks on the tensors it binds, so that a
program whose tensors do not fit the operator (a damaged or hand-edited one) is treated as the kernel treats it:
an ``InvalidArgumentError`` saying what was expected, what was found and what to do. A rewrite that meets one
declines (the instruction keeps its kernel, which refuses the call when it runs); a check made while a fused
step runs raises it from the step. NumPy and the runtime's own modules only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgetorch.errors import InvalidArgumentError

Shape = tuple[int, ...]

_FIX = "re-export the program, or check that it was not damaged"


def broadcast(op: str, *shapes: Shape) -> Shape:
    """The shape element-wise operands of ``shapes`` broadcast to, as the element-wise kernels compute it."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        found = " and ".join(str(tuple(s)) for s in shapes)
        raise InvalidArgumentError(
            f"{op}: expected operands whose shapes broadcast (each trailing dimension equal, or 1), found {found}; "
            f"{_FIX}"
        ) from None


def matmul(op: str, a: Shape, b: Shape) -> None:
    """``mm`` takes two matrices, ``bmm`` two stacks of as many matrices; the inner dimensions agree."""
    if len(a) != len(b) or len(a) not in (2, 3) or a[:-2] != b[:-2] or a[-1] != b[-2]:
        raise InvalidArgumentError(
            f"{op}: expected [n, k] @ [k, m] (mm) or [b, n, k] @ [b, k, m] (bmm), found {tuple(a)} @ {tuple(b)}; {_FIX}"
        )


def window(
    op: str, kernel: Sequence[int], strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int]
) -> None:
    """A pooling window as the pooling kernels take it: positive sizes, strides and dilations, padding at least 0
    and at most half the window."""
    for name, values, low in (("kernel size", kernel, 1), ("stride", strides, 1), ("dilation", dilations, 1)):
        if any(v < low for v in values):
            raise InvalidArgumentError(f"{op}: expected each {name} >= {low}, found {list(values)}; {_FIX}")
    if any(p < 0 or 2 * p > k for p, k in zip(pads, kernel)):
        raise InvalidArgumentError(
            f"{op}: expected padding in [0, kernel size / 2], found {list(pads)} for kernel {list(kernel)}; {_FIX}"
        )


def copy_result(op: str, args: Sequence[Any], x: np.ndarray) -> Shape | None:
    """The shape the copy kernel ``op`` makes of ``x`` given its other arguments' values ``args`` (after the
    input), or None for a copy whose result shape is the one planned for it (clone, squeeze, unsqueeze, alias).
    Raises InvalidArgumentError for arguments the kernel refuses."""
    if op == "aten::slice_copy.Tensor_out":
        dim, start, end, step = args[:4]
        d = _dim(op, dim, x.ndim)
        size = x.shape[d]
        lo, hi = (_clamp(v, default, size) for v, default in ((start, 0), (end, size)))
        step = 1 if step is None else step
        if not isinstance(step, int) or step < 1:
            raise InvalidArgumentError(f"{op}: expected a step of 1 or more, found {step!r}; {_FIX}")
        return x.shape[:d] + (len(range(lo, max(lo, hi), step)),) + x.shape[d + 1 :]
    if op == "aten::select_copy.int_out":
        dim, index = args[:2]
        d = _dim(op, dim, x.ndim)
        if isinstance(index, bool) or not isinstance(index, int) or not -x.shape[d] <= index < x.shape[d]:
            raise InvalidArgumentError(
                f"{op}: expected an index in [{-x.shape[d]}, {x.shape[d]}) for dim {d} of {x.shape}, "
                f"found {index!r}; {_FIX}"
            )
        return x.shape[:d] + x.shape[d + 1 :]
    if op in ("aten::expand_copy.out", "aten::view_copy.out"):
        sizes = list(args[0])
        if op == "aten::expand_copy.out":
            return tuple(x.shape[i - len(sizes) + x.ndim] if s == -1 else s for i, s in enumerate(sizes))
        if sizes.count(-1) == 1:
            known = int(np.prod([s for s in sizes if s != -1]))
            sizes[sizes.index(-1)] = x.size // known if known else 0
        return tuple(sizes)
    return None


def copy_fits(op: str, read: Callable[[int], Any], args: Sequence[int], x: np.ndarray, y: np.ndarray) -> bool:
    """Whether the copy ``y = op(x, *args)`` (``read`` gives an argument's value) may become a view: its planned
    result has the shape the kernel makes. A copy that does not fit keeps its kernel, which refuses or resizes
    as it always does."""
    try:
        shape = copy_result(op, [read(j) for j in args], x)
    except (InvalidArgumentError, TypeError, IndexError, ValueError):
        return False
    return shape is None or shape == y.shape


def _dim(op: str, dim: Any, ndim: int) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -max(ndim, 1) <= dim < max(ndim, 1):
        raise InvalidArgumentError(f"{op}: expected a dim in [{-ndim}, {ndim}), found {dim!r}; {_FIX}")
    return dim % max(ndim, 1)


def _clamp(value: Any, default: int, size: int) -> int:
    """A slice bound as the slice kernel reads it: None is ``default``, negatives count from the end."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"slice: expected an int bound, found {value!r}; {_FIX}")
    return min(max(value + size if value < 0 else value, 0), size)
