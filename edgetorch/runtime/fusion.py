"""Load-time fusion of short element-wise instruction chains in dynamic methods: one step instead of several.

An exported LLM spends much of a decode step in the Python around tiny kernels: an RMSNorm is six
instructions (``pow, mean, add, rsqrt, mul, mul``), a rotary embedding four, a SwiGLU gate five, each
costing tens of microseconds of dispatch and argument handling for a few hundred floats of work. When such a chain's
intermediate values are read by nothing outside it, :func:`fuse_steps` replaces the chain by one step
that computes the same float32 operations in the same order (so the result is bit-identical) with none of
the per-kernel overhead, and writes only the chain's last value. It also elides copies: a ``slice_copy`` or
``view_copy`` whose input memory nothing overwrites while the result is read becomes a NumPy view (see
"copy elision" below).

Only dynamic methods (LLMs are) and only float32 chains are fused; traced runs use the unfused steps so
every instruction still reports its own event and outputs. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from edgetorch.format import program as fbp
from edgetorch.runtime import rewrite_checks
from edgetorch.runtime.memory import resize
from edgetorch.runtime.ops import normalization
from edgetorch.runtime.plan_analysis import Range, kernel_results, overlaps
from edgetorch.runtime.values import ListRef

_F32 = np.dtype(np.float32)
_ONE = np.float32(1)


class _Chain:
    """The instructions at ``pc..pc+len(names)-1`` with their operator names, arguments and results."""

    def __init__(self, ex: Any, pc: int, names: Sequence[str]):
        self.ex, self.pc = ex, pc
        self.args: list[list[int]] = []
        if pc + len(names) > len(ex.instructions):
            raise _NoMatch
        for k, name in enumerate(names):
            a = ex.instructions[pc + k].instr_args
            if not isinstance(a, fbp.KernelCall) or ex.operators[a.op_index] != name:
                raise _NoMatch
            nargs = ex.kernels[a.op_index][1]
            if len(a.args) != nargs + 1 or a.args[-1] != a.args[nargs - 1]:
                raise _NoMatch  # the out argument, then the same value as the result
            self.args.append(list(a.args[:nargs]))

    def out(self, k: int) -> int:
        return self.args[k][-1]


class _NoMatch(Exception):
    pass


class _FusionContext:
    """What the patterns ask about a method: its executor, each value's readers, the values a chain must not
    keep to itself (inputs, outputs, bases of views), and the values some instruction writes."""

    def __init__(self, ex: Any):
        self.ex = ex
        self.readers = ex.facts.readers
        self.inputs = set(ex.plan.inputs)
        self.protected = set(ex.plan.outputs) | self.inputs | ex.facts.view_bases()
        self.writers = ex.facts.writers
        self.root: dict[int, int] = {}  # a value made a view by copy elision -> the value whose memory it reads
        self._ranges: dict[int, tuple[int, int, int] | None] = {}

    def planned_range(self, j: int) -> tuple[int, int, int] | None:
        if j not in self._ranges:
            self._ranges[j] = self.ex.facts.planned_range(j) if j in self.ex.slots else None
        return self._ranges[j]

    def overlaps(self, j: int, memory: Range) -> bool:
        """Whether value ``j``'s planned bytes share any byte with ``memory`` (memory id, first, end)."""
        return overlaps(self.planned_range(j), memory)


def fuse_steps(ex: Any) -> tuple[list[Callable], list[int]] | None:
    """The method's steps with every fusable chain replaced by one step, and each step's first instruction;
    None when nothing fuses (or the method is static, or has jumps)."""
    if ex.static or any(not isinstance(i.instr_args, (fbp.KernelCall, fbp.DelegateCall)) for i in ex.instructions):
        return None
    if len(ex.steps) != len(ex.instructions):
        return None
    return apply_patterns(_FusionContext(ex), _PATTERNS, dict(enumerate(ex.steps)))


Pattern = Callable[[Any, int], tuple[int, Callable]]


def apply_patterns(
    ctx: _FusionContext, patterns: Sequence[Pattern], by_pc: dict[int, Callable]
) -> tuple[list[Callable], list[int]] | None:
    """The method's steps (``by_pc``: each instruction's step; a folded or elided instruction has none) with
    every chain a pattern matches replaced by the pattern's one step, and each step's first instruction; None
    when nothing matches. A chain starts only at an instruction that has a step."""
    steps: list[Callable] = []
    pcs: list[int] = []
    pc, n, fused = 0, len(ctx.ex.instructions), 0
    while pc < n:
        for pattern in patterns if pc in by_pc else ():
            try:
                length, step = pattern(ctx, pc)
            except _NoMatch:
                continue
            except (ValueError, TypeError, IndexError, KeyError):
                # A damaged program whose arguments are not of the kinds the pattern reads (a tensor where a
                # scalar flag belongs): the instructions' own steps, bound and checked by their kernels, stay.
                continue
            steps.append(step)
            pcs.append(pc)
            pc += length
            fused += 1
            break
        else:
            if pc in by_pc:
                steps.append(by_pc[pc])
                pcs.append(pc)
            pc += 1
    return (steps, pcs) if fused else None


def _private(ctx: _FusionContext, chain: _Chain, ks: Sequence[int]) -> None:
    """Require the results of instructions ``ks`` to be float32 and read only inside the chain."""
    end = chain.pc + len(chain.args)
    for k in ks:
        j = chain.out(k)
        if j in ctx.protected or any(not chain.pc <= r < end for r in ctx.readers.get(j, ())):
            raise _NoMatch
        _f32(chain.ex, j)


def _f32(ex: Any, j: int) -> None:
    slot = ex.slots.get(j)
    if slot is None or slot.dtype != _F32:
        raise _NoMatch


def _int(ctx: _FusionContext, j: int) -> int:
    """A load-time integer argument (an Int value no instruction writes)."""
    v = ctx.ex.bound[j]
    if isinstance(v, bool) or not isinstance(v, int) or j in ctx.ex.slots:
        raise _NoMatch
    if j in ctx.writers or j in ctx.inputs:
        raise _NoMatch
    return v


def _int_list(ctx: _FusionContext, j: int) -> list[int]:
    v = ctx.ex.bound[j]
    if not isinstance(v, ListRef):
        raise _NoMatch
    return [_int(ctx, i) for i in v.items]


def _none(ex: Any, j: int) -> None:
    if ex.bound[j] is not None:
        raise _NoMatch


def _store(ex: Any, r: int) -> Callable[[tuple[int, ...]], np.ndarray]:
    """Value ``r``'s planned slot resized to a shape (and stored as its value); the view made for one shape is
    kept and handed out again while the shape stays the same, as it does from one decode step to the next."""
    planned, vals = ex.bound[r], ex.vals
    last_shape: Any = None
    last = planned

    def out(shape: tuple[int, ...]) -> np.ndarray:
        nonlocal last_shape, last
        if shape != last_shape:
            last, last_shape = resize(planned, shape), shape
        vals[r] = last
        return last

    return out


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast shape of ``a`` and ``b``; without NumPy's general (and slower) routine when ``a`` is a
    trailing part of ``b`` (a weight against an activation)."""
    if len(a) <= len(b) and b[len(b) - len(a) :] == a:
        return b
    return rewrite_checks.broadcast("an element-wise operator", a, b)


def _unless_0d(vals: Any, slot: int, unfused: Sequence[Callable], fused: Callable[[], None]) -> Callable[[], None]:
    """``fused``, or the instructions it stands for when value ``slot`` is 0-d at run time: a shape the fused
    formula does not cover, whose meaning (or error) is the kernels' business."""

    def step() -> None:
        if vals[slot].ndim == 0:
            for instruction in unfused:
                instruction()
        else:
            fused()

    step.__name__ = fused.__name__  # what profiles name the step by
    return step


# ---------------------------------------------------------------------------------------------- patterns


def _rms_norm(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``w * (x * rsqrt(mean(x ** 2, -1, keepdim) + eps))``: pow, mean, add, rsqrt, mul, mul."""
    ex = ctx.ex
    c = _Chain(
        ex,
        pc,
        ["aten::pow.Tensor_Scalar_out", "aten::mean.out", "aten::add.out", "aten::rsqrt.out", "aten::mul.out",
         "aten::mul.out"],
    )  # fmt: skip
    (x, two, sq), (sq2, dims, keep, dtype, m), (m2, eps, alpha, a), (a2, r), (p, q, e), (u, v, y) = c.args
    if sq2 != sq or m2 != m or a2 != a or _int(ctx, alpha) != 1:
        raise _NoMatch
    power = ex.bound[two]
    if isinstance(power, bool) or not isinstance(power, (int, float)) or two in ctx.writers:
        raise _NoMatch
    if _int_list(ctx, dims) != [-1] or ex.bound[keep] is not True:
        raise _NoMatch
    _none(ex, dtype)
    if {p, q} != {x, r} or r not in (p, q) or e not in (u, v):
        raise _NoMatch
    w = v if u == e else u
    _private(ctx, c, range(5))
    for j in (x, w, eps, y):
        _f32(ex, j)
    if not ex.slots[eps].constant or not ex.slots[w].constant:
        raise _NoMatch
    vals, store, exponent, unfused = ex.vals, _store(ex, y), np.float32(power), ex.steps[pc : pc + 6]
    square = power == 2  # x * x: the same bits as NumPy's power(x, 2), one cheaper call
    eps_value = np.asarray(ex.bound[eps])
    one_eps = float(eps_value.reshape(-1)[0]) if eps_value.size == 1 else None

    def rms_norm() -> None:
        xv, wv = vals[x], vals[w]
        t = np.multiply(xv, xv) if square else np.power(xv, exponent)
        normalization.rms_scale(xv, t, vals[eps], one_eps)
        np.multiply(wv, t, out=store(_broadcast(wv.shape, t.shape)))

    return 6, _unless_0d(vals, x, unfused, rms_norm)


def _rope(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``x * cos + index_select(x, -1, perm) * sin``: mul, index_select, mul, add."""
    ex = ctx.ex
    c = _Chain(ex, pc, ["aten::mul.out", "aten::index_select.out", "aten::mul.out", "aten::add.out"])
    (x, cos, t1), (x2, dim, perm, t2), (m1, m2, t3), (s1, s2, alpha, y) = c.args
    if x2 not in (x, cos) or t2 not in (m1, m2) or {s1, s2} != {t1, t3} or _int(ctx, alpha) != 1:
        raise _NoMatch
    if x2 == cos:  # mul(cos, x)
        x, cos = cos, x
    sin = m2 if m1 == t2 else m1
    axis = _int(ctx, dim)
    _private(ctx, c, range(3))
    for j in (x, cos, sin, y):
        _f32(ex, j)
    perm_slot = ex.slots.get(perm)
    if perm_slot is None or perm_slot.dtype.kind not in "iu" or cos == y or sin == y:
        raise _NoMatch
    vals, store, unfused = ex.vals, _store(ex, y), ex.steps[pc : pc + 4]

    def rope() -> None:
        xv, cv, sv, iv = vals[x], vals[cos], vals[sin], vals[perm]
        a = np.multiply(xv, cv)
        b = np.take(xv, iv.reshape(-1), axis=axis % xv.ndim)
        np.multiply(b, sv, out=b)
        np.add(a, b, out=store(_broadcast(a.shape, b.shape)))

    return 4, _unless_0d(vals, x, unfused, rope)


def _swiglu(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``silu(h[..., :n]) * h[..., n:]`` of a packed gate/up product: slice, sigmoid, mul, slice, mul."""
    ex = ctx.ex
    c = _Chain(
        ex,
        pc,
        ["aten::slice_copy.Tensor_out", "aten::sigmoid.out", "aten::mul.out", "aten::slice_copy.Tensor_out",
         "aten::mul.out"],
    )  # fmt: skip
    (h, d1, s1, e1, st1, g), (g2, s), (p, q, silu), (h2, d2, s2, e2, st2, u), (m1, m2, y) = c.args
    if g2 != g or {p, q} != {g, s} or h2 != h or {m1, m2} != {silu, u}:
        raise _NoMatch
    if _int(ctx, st1) != 1 or _int(ctx, st2) != 1:
        raise _NoMatch
    dim_a, dim_b = _int(ctx, d1), _int(ctx, d2)
    bounds = (_int(ctx, s1), _int(ctx, e1), _int(ctx, s2), _int(ctx, e2))
    _private(ctx, c, range(4))
    for j in (h, y):
        _f32(ex, j)
    vals, store, unfused = ex.vals, _store(ex, y), ex.steps[pc : pc + 5]

    def swiglu() -> None:
        hv = vals[h]
        ia, ib = dim_a % hv.ndim, dim_b % hv.ndim
        gate = hv[(slice(None),) * ia + (slice(bounds[0], bounds[1]),)]
        up = hv[(slice(None),) * ib + (slice(bounds[2], bounds[3]),)]
        sig = np.negative(gate)
        np.exp(sig, out=sig)
        sig += _ONE
        np.reciprocal(sig, out=sig)
        np.multiply(gate, sig, out=sig)
        np.multiply(sig, up, out=store(_broadcast(sig.shape, up.shape)))

    return 5, _unless_0d(vals, h, unfused, swiglu)


# ---------------------------------------------------------------------------------------------- single instructions
# The commonest float32 kernels of a decode step, bound once: the same NumPy call as the kernel makes, without its
# dtype promotion and scalar handling (which cost more than adding 576 floats).


def _add(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``a + b`` (alpha 1) of two float32 tensors."""
    ex = ctx.ex
    ((a, b, alpha, y),) = _Chain(ex, pc, ["aten::add.out"]).args
    if _int(ctx, alpha) != 1:
        raise _NoMatch
    for j in (a, b, y):
        _f32(ex, j)
    vals, store = ex.vals, _store(ex, y)

    def add() -> None:
        av, bv = vals[a], vals[b]
        np.add(av, bv, out=store(_broadcast(av.shape, bv.shape)))

    return 1, add


def _mean(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """The mean of a float32 tensor over its last dimension."""
    ex = ctx.ex
    ((x, dims, keep, dtype, y),) = _Chain(ex, pc, ["aten::mean.out"]).args
    if _int_list(ctx, dims) != [-1] or not isinstance(ex.bound[keep], bool) or keep in ctx.writers:
        raise _NoMatch
    _none(ex, dtype)
    for j in (x, y):
        _f32(ex, j)
    vals, store, keepdim, unfused = ex.vals, _store(ex, y), ex.bound[keep], ex.steps[pc]

    def mean() -> None:
        xv = vals[x]
        o = store(xv.shape[:-1] + (1,) if keepdim else xv.shape[:-1])
        np.add.reduce(xv, axis=(xv.ndim - 1,), dtype=_F32, keepdims=keepdim, out=o)
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(o, xv.shape[-1], out=o, casting="unsafe")

    return 1, _unless_0d(vals, x, [unfused], mean)


# ---------------------------------------------------------------------------------------------- copy elision
# A decode step copies a few hundred floats per ``view_copy`` and ``slice_copy`` (the fused q/k/v product cut
# into heads), 180 of them a token, each costing more in dispatch than in bytes. Where nothing overwrites the
# copied memory while the copy is read, the result can be a NumPy view of its input instead: same values,
# no copy and no kernel call.


def _elidable(ctx: _FusionContext, pc: int, source: int, result: int) -> None:
    """Require that ``result`` (written by instruction ``pc`` only) can be a view of ``source``.

    The view reads ``source``'s memory (or, when ``source`` is a view itself, its root's) until the last
    reader of ``result``; so no instruction from ``pc`` on up to that reader may write a value whose planned
    memory overlaps it, nor the root itself (a cache written in place), and no reader may write ``result``.
    A delegate counts as writing all its arguments, so a result a delegate reads stays a copy."""
    ex = ctx.ex
    root = ctx.root.get(source, source)
    slot, src = ex.slots.get(result), ex.slots.get(root)
    if result in ctx.protected or slot is None or src is None or source not in ex.slots:
        raise _NoMatch
    if slot.dtype != ex.slots[source].dtype or ctx.writers.get(result) != {pc}:
        raise _NoMatch
    readers = ctx.readers.get(result, set()) - {pc}  # its own out argument
    if not readers or min(readers) < pc:
        raise _NoMatch
    memory = None if src.constant else ctx.planned_range(root)
    if memory is None and not src.constant:
        raise _NoMatch  # memory we cannot see the writers of
    if ex.facts.written_over(memory, pc + 1, max(readers), ctx.planned_range, root):
        raise _NoMatch
    ctx.root[result] = root


def _reader(ex: Any, j: int) -> Callable[[], Any]:
    """The value of argument ``j`` at run time: a load-time constant, or read from ``vals``."""
    if j in ex.slots or isinstance(ex.bound[j], ListRef):
        raise _NoMatch
    vals = ex.vals
    return lambda: vals[j]


def _cut(ctx: _FusionContext, axis: int, start: int, end: int) -> Callable[[], tuple]:
    """The index ``[..., start:end]`` along ``axis``: made once when both bounds are fixed at load (an int or
    None that no instruction writes and no input sets), else read at run time."""
    lo, hi, lead = _reader(ctx.ex, start), _reader(ctx.ex, end), (slice(None),) * axis
    if not {start, end} & (ctx.writers.keys() | ctx.inputs):
        fixed = lead + (slice(lo(), hi()),)
        return lambda: fixed
    return lambda: lead + (slice(lo(), hi()),)


def _sizes(ex: Any, j: int) -> ListRef:
    """A ``view_copy`` size argument: a list of integers, fixed at load or symbolic (read at run time)."""
    ref = ex.bound[j]
    if not isinstance(ref, ListRef) or any(i in ex.slots for i in ref.items):
        raise _NoMatch
    return ref


def _view_copy(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``view_copy(x, size)`` as ``x.reshape(size)`` (a copy only where NumPy cannot view, as the kernel's)."""
    ex = ctx.ex
    ((x, size, y),) = _Chain(ex, pc, ["aten::view_copy.out"]).args
    ref = _sizes(ex, size)
    _elidable(ctx, pc, x, y)
    vals = ex.vals

    def view() -> None:
        vals[y] = vals[x].reshape(ref.resolve(vals))

    return 1, view


def _slice_copy(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``slice_copy(x, dim, start, end, 1)`` as the view ``x[..., start:end]`` along ``dim``."""
    ex = ctx.ex
    ((x, dim, start, end, step, y),) = _Chain(ex, pc, ["aten::slice_copy.Tensor_out"]).args
    if _int(ctx, step) != 1:
        raise _NoMatch
    axis, rank = _int(ctx, dim), len(ex.slots[x].sizes) if x in ex.slots else 0
    if not -rank <= axis < rank:
        raise _NoMatch  # the kernel reports it
    cut = _cut(ctx, axis % rank, start, end)
    _elidable(ctx, pc, x, y)
    vals = ex.vals

    def view_slice() -> None:
        vals[y] = vals[x][cut()]

    return 1, view_slice


def _into_view(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """A kernel whose only reader is the ``view_copy`` after it, writing straight into the view's memory.

    The planner often lets the view take the kernel's result's memory as soon as the copy has read it
    (a matrix product's [rows, 960] cut into [1, rows, 15, 64] heads), so the view cannot read that memory
    later; instead the kernel's ``out`` becomes the view's planned slot seen at the result's shape (the same
    number of elements), and the view is then a reshape of it. The kernel's inputs must not lie in that
    memory (the planner may have given it to a value that dies at the kernel)."""
    ex = ctx.ex
    a, b = (ex.instructions[pc + k].instr_args if pc + k < len(ex.instructions) else None for k in (0, 1))
    if not isinstance(a, fbp.KernelCall) or not isinstance(b, fbp.KernelCall):
        raise _NoMatch
    ((x, size, y),) = _Chain(ex, pc + 1, ["aten::view_copy.out"]).args
    fn, nargs = ex.kernels[a.op_index]
    params = list(a.args[:nargs])
    if kernel_results(fn, a.args, nargs) != [x] or x not in params or ctx.readers.get(x, set()) != {pc, pc + 1}:
        raise _NoMatch
    ref = _sizes(ex, size)
    into, planned = ex.bound[y], ex.bound[x]
    if x in ctx.protected or y in ctx.protected or x not in ex.slots or y not in ex.slots:
        raise _NoMatch
    if into.dtype != planned.dtype or into.size != planned.size or not into.flags.c_contiguous:
        raise _NoMatch
    memory = ctx.planned_range(y)
    # the view writes it first (a delegate reading it later counts as writing it: that is after the view)
    if min(ctx.writers.get(y) or {pc}) != pc + 1 or memory is None:
        raise _NoMatch
    if any(j != x and ctx.overlaps(ctx.root.get(j, j), memory) for j in ex.facts.items(params)):
        raise _NoMatch
    ex.bound[x] = into.reshape(planned.shape)  # the slot the kernel's step binds as its out
    try:
        produce = ex._kernel_step(fn, params, [x], ex.operators[a.op_index])
    finally:
        ex.bound[x] = planned
    vals = ex.vals

    def into_view() -> None:
        produce()
        vals[y] = vals[x].reshape(ref.resolve(vals))

    into_view.__name__ = f"{ex.operators[a.op_index]} into view"
    return 2, into_view


# ---------------------------------------------------------------------------------------------- glue between delegates
# A decode step's remaining copies (those a view cannot replace), the rotary embedding's index_select and the KV
# caches' index_put_ move a few KB each; the generic step spends more on reading arguments, re-checking the
# dimension and re-making the out view than on the bytes. These steps make the same NumPy call as the kernel with
# what can be settled at load settled there, and hand anything outside their fast path to the kernel's own step
# (which also raises the errors).


def _rank(ex: Any, x: int, y: int) -> int:
    """The rank of tensor ``x``, whose result ``y`` holds its dtype (so a plain copy is the kernel's cast)."""
    source, result = ex.slots.get(x), ex.slots.get(y)
    if source is None or result is None or source.dtype != result.dtype:
        raise _NoMatch
    return len(source.sizes)


def _axis(dim: int, rank: int) -> int:
    if not -rank <= dim < rank:
        raise _NoMatch  # the kernel reports it
    return dim % rank


def _copy_slice(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``slice_copy(x, dim, start, end, 1)`` that stays a copy: ``x[..., start:end]`` copied into its out."""
    ex = ctx.ex
    ((x, dim, start, end, step, y),) = _Chain(ex, pc, ["aten::slice_copy.Tensor_out"]).args
    if _int(ctx, step) != 1:
        raise _NoMatch
    rank = _rank(ex, x, y)
    axis = _axis(_int(ctx, dim), rank)
    cut = _cut(ctx, axis, start, end)
    vals, store, unfused = ex.vals, _store(ex, y), ex.steps[pc]

    def copy_slice() -> None:
        xv = vals[x]
        if xv.ndim != rank:
            unfused()
            return
        part = xv[cut()]
        np.copyto(store(part.shape), part)

    return 1, copy_slice


def _copy_view(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``view_copy(x, size)`` that stays a copy: ``x.reshape(size)`` copied into its out."""
    ex = ctx.ex
    ((x, size, y),) = _Chain(ex, pc, ["aten::view_copy.out"]).args
    ref = _sizes(ex, size)
    _rank(ex, x, y)
    vals, store = ex.vals, _store(ex, y)

    def copy_view() -> None:
        view = vals[x].reshape(ref.resolve(vals))
        np.copyto(store(view.shape), view)

    return 1, copy_view


def _split_heads(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``view_copy(h, size)`` read only by the ``slice_copy`` steps right after it (a fused q/k/v product cut
    into heads): each slice cut from ``h`` seen at ``size`` and copied into its out, with no copy of the whole.

    The planner may give one slice's out some of ``h``'s memory (the whole view was a copy, so ``h`` was dead by
    then); that slice is copied last (NumPy's copy reads an overlapping source before writing), and the outs may
    not share memory with each other."""
    ex = ctx.ex
    ((h, size, a),) = _Chain(ex, pc, ["aten::view_copy.out"]).args
    ref = _sizes(ex, size)
    readers = ctx.readers.get(a, set()) - {pc}
    count = len(readers)
    if count < 2 or readers != set(range(pc + 1, pc + 1 + count)) or a in ctx.protected:
        raise _NoMatch
    rank = _rank(ex, a, a)
    _rank(ex, h, a)
    if rank != len(ref.items) or ctx.writers.get(a) != {pc}:
        raise _NoMatch
    root = ctx.root.get(h, h)
    memory = ctx.planned_range(root)
    parts: list[tuple[Callable[[], tuple], Callable]] = []
    last: list[tuple[Callable[[], tuple], Callable]] = []
    outs: list[int] = []
    for x, dim, start, end, step, y in _Chain(ex, pc + 1, ["aten::slice_copy.Tensor_out"] * count).args:
        if x != a or _int(ctx, step) != 1 or _rank(ex, a, y) != rank or y in (h, root, a):
            raise _NoMatch
        if y in outs or any(r is not None and ctx.overlaps(y, r) for r in map(ctx.planned_range, outs)):
            raise _NoMatch
        outs.append(y)
        part = (_cut(ctx, _axis(_int(ctx, dim), rank), start, end), _store(ex, y))
        (last if memory is not None and ctx.overlaps(y, memory) else parts).append(part)
    if len(last) > 1:
        raise _NoMatch
    parts += last
    vals = ex.vals

    def split_heads() -> None:
        whole = vals[h].reshape(ref.resolve(vals))
        for cut, store in parts:
            part = whole[cut()]
            np.copyto(store(part.shape), part)

    return 1 + count, split_heads


def _index_select(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``index_select(x, dim, index)``; a constant index whose entries all lie inside ``x`` skips the bounds
    check per element (NumPy's ``mode='clip'`` then takes the same elements without buffering the out)."""
    ex = ctx.ex
    ((x, dim, index, y),) = _Chain(ex, pc, ["aten::index_select.out"]).args
    rank = _rank(ex, x, y)
    axis = _axis(_int(ctx, dim), rank)
    slot = ex.slots.get(index)
    if slot is None or slot.dtype.kind not in "iu":
        raise _NoMatch
    known: Any = ex.bound[index].reshape(-1) if slot.constant else None
    # the size the axis must exceed for ``known`` to be in range (0 < the size: never when an entry is negative)
    limit = (int(known.max()) if known.min() >= 0 else 1 << 62) if known is not None and known.size else 0
    vals, store, unfused = ex.vals, _store(ex, y), ex.steps[pc]
    seen: Any = None  # the last input shape for which ``known`` was in range, and the result's shape then
    shape: tuple[int, ...] = ()

    def index_select() -> None:
        nonlocal seen, shape
        xv = vals[x]
        if xv.shape == seen:
            np.take(xv, known, axis=axis, out=store(shape), mode="clip")
            return
        if xv.ndim != rank:
            unfused()
            return
        if known is not None and limit < xv.shape[axis]:
            seen, shape = xv.shape, xv.shape[:axis] + (known.size,) + xv.shape[axis + 1 :]
            np.take(xv, known, axis=axis, out=store(shape), mode="clip")
            return
        iv = vals[index].reshape(-1)
        np.take(xv, iv, axis=axis, out=store(xv.shape[:axis] + (iv.size,) + xv.shape[axis + 1 :]))

    return 1, index_select


def _put_row(ctx: _FusionContext, pc: int) -> tuple[int, Callable]:
    """``index_put_(cache, [None, .., None, pos], values, False)`` with ``pos`` one in-range position (a decode
    step's KV-cache write) as the slice assignment ``cache[.., pos:pos + 1] = values``: the same elements written,
    without NumPy's fancy indexing. Other positions (a prefill's several, one out of range) take the kernel."""
    ex = ctx.ex
    a = ex.instructions[pc].instr_args
    if not isinstance(a, fbp.KernelCall) or ex.operators[a.op_index] != "aten::index_put_":
        raise _NoMatch
    nargs = ex.kernels[a.op_index][1]
    if nargs != 4 or len(a.args) != 5 or a.args[4] != a.args[0]:
        raise _NoMatch
    t, indices, v, accumulate = a.args[:4]
    ref = ex.bound[indices]
    if ex.bound[accumulate] is not False or accumulate in ctx.writers or not isinstance(ref, ListRef):
        raise _NoMatch
    *nones, pos = ref.items
    if any(j >= 0 and (ex.bound[j] is not None or j in ctx.writers) for j in nones):
        raise _NoMatch
    target, values, where = ex.slots.get(t), ex.slots.get(v), ex.slots.get(pos)
    if target is None or values is None or where is None or target.constant or values.dtype != target.dtype:
        raise _NoMatch
    if where.dtype.kind != "i" or len(target.sizes) <= len(nones):
        raise _NoMatch
    cache, lead, unfused, vals = ex.bound[t], (slice(None),) * len(nones), ex.steps[pc], ex.vals
    n = cache.shape[len(nones)]

    def put_row() -> None:
        p = vals[pos]
        if p.shape == (1,):
            i = p.item()
            if -n <= i < n:
                i += n if i < 0 else 0
                try:
                    cache[lead + (slice(i, i + 1),)] = vals[v]
                except ValueError:  # values that do not broadcast (nothing written): the kernel's error
                    unfused()
                vals[t] = cache
                return
        unfused()

    return 1, put_row


_PATTERNS = (
    _rms_norm, _rope, _swiglu, _add, _mean, _view_copy, _slice_copy, _into_view, _split_heads, _copy_slice, _copy_view,
    _index_select, _put_row,
)  # fmt: skip
