"""Load-time copy elision in static methods: a copy that keeps its input's element order becomes a NumPy view.

An exported attention block copies its activations several times without changing a value: ``expand_copy`` to
the shape the tensor already has, ``squeeze_copy`` and ``unsqueeze_copy``, ``clone`` into the same layout, a
``slice_copy`` or ``select_copy`` of a contiguous chunk (``qkv[0]``). Each is a pass through memory and a kernel
call (ViT-tiny has 132 of them). When the copy's input keeps its bytes for as long as the
copy's result (and the static views planned over it) is read, the result is made a view of the input's memory
at load and the instruction is dropped: every later instruction then reads the input's bytes directly.

A copy is elided when:
- its input is computed (not a constant: those fold) and C-contiguous, its result C-contiguous, of the same
  dtype, and read in the same element order (same shape for ``expand_copy`` and ``clone``; a chunk whose
  leading dims are 1 for slices and selects);
- the result is not a method input or output, no other instruction writes it, and every static view planned
  over it covers exactly its bytes;
- no instruction from the copy to the last reader of the result (or of its views) writes a byte of the input's
  memory, judged on the memory plan (the input may itself be an elided copy: then its input's bytes count).

A method loaded with an event tracer (``enable_etdump=True``, or ``load_method(event_tracer=...)``) elides
nothing, so that every instruction does its own work; a tracer set later (``set_event_tracer``) finds the
copies already elided: like folded instructions, they report their events with zero time and their view.
Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from edgetorch.format import program as fbp
from edgetorch.runtime import rewrite_checks
from edgetorch.runtime.plan_analysis import Range, kernel_results


def _same_shape(ex: Any, args: list[int], a: np.ndarray, b: np.ndarray) -> int | None:
    return 0 if a.shape == b.shape else None


def _same_size(ex: Any, args: list[int], a: np.ndarray, b: np.ndarray) -> int | None:
    return 0 if a.size == b.size else None


def _chunk(a: np.ndarray, b: np.ndarray, dim: Any, first: int) -> int | None:
    """The element offset of ``b`` in ``a`` when ``b`` is ``a``'s items ``first..`` along ``dim`` and every dim
    before it has size 1 (so the chunk is one contiguous run of ``a``)."""
    if isinstance(dim, bool) or not isinstance(dim, int) or not -a.ndim <= dim < a.ndim:
        return None
    dim %= a.ndim
    if any(s != 1 for s in a.shape[:dim]):
        return None
    inner = math.prod(a.shape[dim + 1 :])
    offset = first * inner
    return offset if 0 <= offset and offset + b.size <= a.size else None


def _slice(ex: Any, args: list[int], a: np.ndarray, b: np.ndarray) -> int | None:
    dim, start, step = (ex.bound[j] for j in (args[1], args[2], args[4]))
    if step not in (None, 1) or not isinstance(dim, int) or not -a.ndim <= dim < a.ndim:
        return None
    size = a.shape[dim % a.ndim]
    first = 0 if start is None else start
    if isinstance(first, bool) or not isinstance(first, int):
        return None
    first = min(max(first + size if first < 0 else first, 0), size)
    return _chunk(a, b, dim, first)


def _select(ex: Any, args: list[int], a: np.ndarray, b: np.ndarray) -> int | None:
    dim, index = ex.bound[args[1]], ex.bound[args[2]]
    if isinstance(index, bool) or not isinstance(index, int) or not isinstance(dim, int):
        return None
    if not -a.ndim <= dim < a.ndim:
        return None
    size = a.shape[dim % a.ndim]
    return _chunk(a, b, dim, index + size if index < 0 else index)


# Copy operators whose result reads its input's elements in order, and where in the input it starts.
_RULES: dict[str, Callable[[Any, list[int], np.ndarray, np.ndarray], int | None]] = {
    "aten::expand_copy.out": _same_shape,
    "aten::clone.out": _same_shape,
    "dim_order_ops::_clone_dim_order.out": _same_shape,
    "aten::alias_copy.out": _same_shape,
    "aten::view_copy.out": _same_size,
    "aten::squeeze_copy.dims_out": _same_size,
    "aten::squeeze_copy.dim_out": _same_size,
    "aten::squeeze_copy.out": _same_size,
    "aten::unsqueeze_copy.out": _same_size,
    "aten::slice_copy.Tensor_out": _slice,
    "aten::select_copy.int_out": _select,
}


def elide_copies(ex: Any, live: set[int]) -> set[int]:
    """Make the elidable copies among the instructions ``live`` (those with a step: not folded) of the static
    method ``ex`` views, rebinding ``ex.bound`` and ``ex.vals`` for their results and the static views over
    them, and return their instruction indices, which then bind no step."""
    if not ex.static:
        return set()
    facts, bound, slots = ex.facts, ex.bound, ex.slots
    writers, last_read = facts.writers, facts.last_read
    view_map = facts.view_map()
    views_of: dict[int, set[int]] = {}
    for v, bases in view_map.items():
        for base in bases:
            views_of.setdefault(base, set()).add(v)
    protected = set(ex.plan.inputs) | set(ex.plan.outputs)
    moved: dict[int, Range] = {}  # an elided result -> the bytes it now reads

    def bytes_of(j: int) -> Range | None:
        return moved.get(j) or facts.planned_range(j)

    elided: set[int] = set()
    for pc, ins in enumerate(ex.instructions):
        a = ins.instr_args
        if pc not in live or not isinstance(a, fbp.KernelCall) or not 0 <= a.op_index < len(ex.operators):
            continue
        rule = _RULES.get(ex.operators[a.op_index])
        if rule is None:
            continue
        fn, nargs = ex.kernels[a.op_index]
        results = kernel_results(fn, a.args, nargs)
        if len(results) != 1 or len(a.args) < nargs:
            continue
        src, dst = a.args[0], results[0]
        if src not in slots or dst not in slots or slots[src].constant or dst in protected:
            continue
        if writers.get(dst) != {pc}:
            continue
        x, y = bound[src], bound[dst]
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray) or x.dtype != y.dtype:
            continue
        if not (x.flags.c_contiguous and y.flags.c_contiguous):
            continue
        if not rewrite_checks.copy_fits(ex.operators[a.op_index], ex._arg, a.args[1:nargs], x, y):
            continue
        offset = rule(ex, list(a.args), x, y)
        source = bytes_of(src)
        if offset is None or source is None:
            continue
        views = views_of.get(dst, set())
        if any(
            v in protected or view_map[v] != {dst} or facts.planned_range(v) != facts.planned_range(dst) for v in views
        ):
            continue
        first = source[1] + offset * x.itemsize
        reads: Range = (source[0], first, first + y.nbytes)
        last = max(last_read.get(j, pc) for j in {dst, *views})
        if facts.written_over(reads, pc + 1, last, facts.planned_range):
            continue
        view = x.reshape(-1)[offset : offset + y.size].reshape(y.shape)
        bound[dst] = ex.vals[dst] = view
        moved[dst] = reads
        for v in views:
            bound[v] = ex.vals[v] = view.reshape(bound[v].shape)
            moved[v] = reads
        elided.add(pc)
    return elided
