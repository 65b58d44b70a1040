"""Scalar (``executorch_prim``) kernels: the symbolic-size arithmetic a program does at run time.

Torch-free. ExecuTorch emits these for dynamic shapes (``sym_size`` of an input, then ``add``,
``floordiv``, ...) and for control flow (``et_copy_index``, ``et_view``). Each takes Python
numbers (or a tensor) and returns a Python number, with Python's semantics as ``torch.SymInt``
has them (``//`` and ``%`` round toward negative infinity; ``/`` is true division).
Names are the ones ExecuTorch's emitter writes into a program: ``aten::sym_numel`` (its ``default``
overload is written as no overload) but ``executorch_prim::et_view.default``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable

import numpy as np

from edgetorch.errors import InvalidArgumentError
from edgetorch.runtime.kernels.registry import register_kernel, wrap_dim
from edgetorch.runtime.memory import resize

Number = int | float | bool


def sym_max(a: Number, b: Number) -> Number:
    """The larger of ``a`` and ``b``; a float if either is (as ``torch.sym_max`` promotes)."""
    return promoted(max(a, b), a, b)


def sym_min(a: Number, b: Number) -> Number:
    """The smaller of ``a`` and ``b``; a float if either is (as ``torch.sym_min`` promotes)."""
    return promoted(min(a, b), a, b)


def promoted(result: Number, a: Number, b: Number) -> Number:
    """``result`` as a float when ``a`` or ``b`` is one."""
    return float(result) if isinstance(a, float) or isinstance(b, float) else result


def sym_ite(condition: bool, if_true: Number, if_false: Number) -> Number:
    """``if_true`` when ``condition`` holds, else ``if_false``."""
    return if_true if condition else if_false


BINARY: dict[str, Callable[[Number, Number], Number]] = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "floordiv": operator.floordiv,
    "truediv": operator.truediv,
    "mod": operator.mod,
    "eq": operator.eq,
    "gt": operator.gt,
    "lt": operator.lt,
    "ge": operator.ge,
    "le": operator.le,
    "sym_max": sym_max,
    "sym_min": sym_min,
}

UNARY: dict[str, Callable[[Number], Number]] = {
    "neg": operator.neg,
    "sym_float": float,
    "sym_int": int,
    "sym_not": operator.not_,
    "ceil": math.ceil,
    "trunc": math.trunc,
    # round() of a float rounds half to even and returns an int, as torch.SymFloat does.
    "round": round,
}


for _name, _fn in BINARY.items():
    register_kernel(f"executorch_prim::{_name}.Scalar", _fn, nargs=2)
for _name, _unary in UNARY.items():
    register_kernel(f"executorch_prim::{_name}.Scalar", _unary, nargs=1)
# The integer-only overloads ExecuTorch's C++ runtime also registers.
register_kernel("executorch_prim::floordiv.int", operator.floordiv, nargs=2)
register_kernel("executorch_prim::mod.int", operator.mod, nargs=2)
register_kernel("executorch_prim::sym_ite.Scalar", sym_ite)


def sym_size(self: np.ndarray, dim: int) -> int:
    """The size of axis ``dim`` of ``self`` (negative counts from the end)."""
    return int(self.shape[wrap_dim(dim, self.ndim)])


def sym_stride(self: np.ndarray, dim: int) -> int:
    """The stride of axis ``dim`` of ``self`` in elements, as ExecuTorch's contiguous layout has it."""
    return math.prod(self.shape[wrap_dim(dim, self.ndim) + 1 :])


def sym_numel(self: np.ndarray) -> int:
    """The number of elements of ``self``."""
    return int(self.size)


def local_scalar_dense(self: np.ndarray) -> Number:
    """The single value of a one-element tensor as a Python number."""
    if self.size < 1:
        raise InvalidArgumentError(
            f"_local_scalar_dense expects a tensor with at least one element, got shape {self.shape}"
        )
    value = self.reshape(-1)[0]
    return value.item() if self.dtype.kind in "biuf" else float(value)


def et_copy_index(copy_to: np.ndarray, copy_from: np.ndarray, index: int) -> np.ndarray:
    """``copy_to`` grown to ``index + 1`` rows with ``copy_from`` written as row ``index``; returns it.

    Used by lowered ``torch.map``/``scan`` to stack one iteration's result per call; ``copy_to`` is
    planned at the upper bound, so growing it is a resize within its slot.
    """
    if copy_to.ndim != copy_from.ndim + 1:
        raise InvalidArgumentError(
            f"et_copy_index expects copy_to to have one more dim than copy_from, "
            f"got shapes {copy_to.shape} and {copy_from.shape}"
        )
    if index > 0 and copy_to.shape[1:] != copy_from.shape:
        raise InvalidArgumentError(
            f"et_copy_index: row shape {copy_from.shape} differs from copy_to's {copy_to.shape[1:]}"
        )
    copy_to = resize(copy_to, (index + 1, *copy_from.shape))
    np.copyto(copy_to[index], copy_from, casting="unsafe")
    return copy_to


def et_view(self: np.ndarray, size: list[int]) -> np.ndarray:
    """A view (no copy) of ``self`` with shape ``size`` (one entry may be -1)."""
    view = self.view()
    view.shape = tuple(size)
    return view


register_kernel("aten::sym_size.int", sym_size)
register_kernel("aten::sym_stride.int", sym_stride)
register_kernel("aten::sym_numel", sym_numel)
register_kernel("aten::_local_scalar_dense", local_scalar_dense)
et_copy_index.resizes_arg = 0  # type: ignore[attr-defined]  # (a function attribute, which mypy does not model) ExecuTorch emits no result value: the executor stores the resized copy_to
register_kernel("executorch_prim::et_copy_index.tensor", et_copy_index)
register_kernel("executorch_prim::et_view.default", et_view)
