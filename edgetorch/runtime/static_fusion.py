"""Load-time fusion in static methods: instruction chains an exported vision or attention model repeats, each
replaced by one step that computes the same float32 results with fewer passes over memory.

- **Batch norm, then a clamp** (``_native_batch_norm_legit_no_training``, then ``hardtanh`` or ``relu``; the
  clamp is optional): a convolutional network that was not folded by a backend runs both after every
  convolution, three passes (scale, shift, clamp) and two kernel calls. The fused step makes one pass with the
  scale and shift computed once, at load, exactly as the batch-norm kernel computes them each call, and the
  same float32 multiply, add and comparisons, so the result is the same bit for bit. The fast tier compiles the
  pass (``scale_shift_clamp``); the NumPy tier runs its three passes in one step.
- **Safe softmax** (``_softmax``, ``eq(-inf)``, ``logical_not``, ``any``, ``logical_not``, ``full_like(0)``,
  ``where``): torch's decomposition of scaled dot-product attention zeroes the rows whose scores are all
  ``-inf``. The compiled softmax does that in its own pass (``softmax`` with ``safe``), instead of five more
  passes over the scores; fast tier only (the NumPy tier keeps the instructions). The tail's instructions may
  come in any order their data flow allows. When the softmax ran in a delegate (XNNPACK has no ``eq`` or
  ``any``), the tail alone is one compiled pass (``masked_rows``) instead of five kernels (MiniLM's six
  layers).

- **A linear layer, then its GELU or residual add** (``addmm`` then ``gelu`` or ``add``): the matrix product
  into the layer's memory, then one compiled pass adds the bias and applies the GELU or the residual
  (``bias_gelu``, ``bias_add``) instead of a bias pass and a second pass; same float32 operations, same bits.

- **A linear layer on constant weights** (``addmm`` or ``mm`` whose right operand is a constant, e.g. the
  layer's weight transposed by constant folding): the fast tier's packed GEMM (kernels/gemm.py) with the bias
  in the same pass; also the matrix product of the GELU/residual chains above. It sums in its own order
  (within float32 rounding of sgemm) and holds a packed copy of the weights beside the method's own, so a
  method packs all such layers or none, as the policy's ``packs`` rule says (the XNNPACK delegate's rule too). While such a method runs, NumPy's BLAS is held to one thread (blas_threads.py), so a
  method whose convolutions (BLAS's work in this runtime) outweigh its linear layers packs nothing.
- **The rest of such a method on the threads too**: in a method that packs (or has no linear or convolution
  products of its own), ``bmm`` runs the batched packed GEMM (gemm.batch_matmul) and the row kernels (softmax,
  layer norm, GELU, the linear epilogues) split their rows over numba's threads (compiled.rows_step); the
  same bits as on one thread.

- **Max pooling whose indices nothing reads** (``max_pool2d_with_indices``; ResNet's stem): the maxima alone,
  without the dozen passes that find each window's winning index; both tiers.

- **Fixed-shape float32 kernels bound directly**: an add, subtract, multiply or divide (tensor or scalar), a
  ``bmm``/``mm`` or a layer norm whose operands are float32 is bound to the NumPy ufunc, matmul or compiled
  kernel the portable kernel would reach after its checks and shape and dtype work, which cost more than a
  small op's arithmetic.

Only intermediate values read by nothing outside a chain are dropped; traced runs use the unfused steps, so
every instruction still reports its own event. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.format import program as fbp
from edgetorch.runtime import policy, rewrite_checks
from edgetorch.runtime.fusion import _F32, _FusionContext, _int, _NoMatch, apply_patterns
from edgetorch.runtime.kernels import blas_threads, compiled, gemm
from edgetorch.runtime.ops import activation, window
from edgetorch.runtime.ops import epilogue as ops_epilogue
from edgetorch.runtime.ops import pool as ops_pool
from edgetorch.runtime.ops.window import expand

_BATCH_NORM = "aten::_native_batch_norm_legit_no_training.out"
# The instructions after a softmax that zero the rows whose scores are all -inf, in any order their data flow
# allows: eq(x, -inf), logical_not, any(-1, keepdim), logical_not, full_like(0) (folded at load), where.
_MASK_TAIL = {
    "aten::eq.Scalar_out": 1,
    "aten::logical_not.out": 2,
    "aten::any.out": 1,
    "aten::full_like.out": 1,
    "aten::where.self_out": 1,
}
_TAIL_LENGTH = sum(_MASK_TAIL.values())


class _StaticContext(_FusionContext):
    """The method's facts the patterns ask about, and the static views planned over each computed tensor."""

    def __init__(self, ex: Any, live: set[int]):
        super().__init__(ex)
        self.live = live  # the instructions that run (not folded, not elided)
        # Whether the method's products run on the fast tier's kernels, over numba's threads: its linear layers
        # on packed weights, its batch matmuls, its row kernels split. While it runs, NumPy's BLAS is held to
        # one thread, so a method whose convolutions (BLAS's work in this runtime) outweigh its linear layers
        # keeps sgemm. All or nothing: a method that packs some layers holds BLAS for the others too, so a
        # method whose layers pass the budget packs none (docs/benchmarks.md, "Packing policy").
        # A method with neither (its products delegated) runs its row kernels on the threads too.
        linear, convolutions, constant_bytes = _products(ex)
        self.compiled = policy.compiled_tier()  # the tier, read once for all the method's patterns
        self.packing = self.compiled and convolutions < max(linear, 1) and policy.current().packs(constant_bytes)
        self.views: dict[int, set[int]] = {}
        for v, bases in ex.facts.view_map().items():
            for base in bases:
                self.views.setdefault(base, set()).add(v)


def fuse_static(ex: Any) -> tuple[list[Callable], list[int]] | None:
    """The static method's steps with every fusable chain replaced by one step, and each step's first
    instruction; None when nothing fuses (or the method is not static)."""
    if not ex.static:
        return None
    by_pc = dict(zip(ex.step_pcs, ex.steps))
    patterns = (
        _batch_norm, _safe_softmax, _masked_rows, _linear_epilogue, _packed_linear, _expanded_linear,
        _max_pool_values, _direct,
    )  # fmt: skip
    ctx = _StaticContext(ex, set(by_pc))
    return apply_patterns(ctx, patterns, by_pc)


def _call(ex: Any, pc: int, name: str) -> list[int]:
    """The arguments (then the results) of instruction ``pc`` when it calls ``name``."""
    if pc >= len(ex.instructions):
        raise _NoMatch
    a = ex.instructions[pc].instr_args
    if not isinstance(a, fbp.KernelCall) or ex.operators[a.op_index] != name:
        raise _NoMatch
    return list(a.args)


def _flat_f32(ex: Any, *values: int) -> list[np.ndarray]:
    """The planned float32, C-contiguous arrays of ``values``."""
    arrays = [ex.bound[j] for j in values]
    if not all(j in ex.slots and a is not None for j, a in zip(values, arrays)) or not compiled.flat_float32(*arrays):
        raise _NoMatch  # flat_float32 takes None for an absent array
    return arrays


def _same_or_apart(a: np.ndarray, b: np.ndarray) -> None:
    """Require the input and output of a fused pass to be the same memory or to share none: the planner may
    give a chain's last value memory its first value had (dead by then, unfused), and a pass that reads one
    while writing the other is right only when they coincide or are apart."""
    if a.ctypes.data != b.ctypes.data and np.shares_memory(a, b):
        raise _NoMatch


def _constant(ex: Any, j: int) -> np.ndarray | None:
    """A constant tensor argument (None when the argument is None)."""
    v = ex.bound[j]
    if v is None:
        return None
    slot = ex.slots.get(j)
    if slot is None or not slot.constant or not isinstance(v, np.ndarray):
        raise _NoMatch
    return v


def _scalar(ctx: _StaticContext, j: int) -> float:
    """A load-time number argument (no instruction writes it)."""
    v = ctx.ex.bound[j]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or j in ctx.ex.slots or j in ctx.writers:
        raise _NoMatch
    return float(v)


def _only_readers(ctx: _StaticContext, j: int, first: int, end: int, kept: set[int] | None = None) -> None:
    """Require value ``j`` to be named by instructions ``first..end-1`` alone (which includes its writer) and
    not be in ``kept`` (default: the method's inputs, outputs and view bases)."""
    if j in (ctx.protected if kept is None else kept) or any(not first <= r < end for r in ctx.readers.get(j, ())):
        raise _NoMatch


def _batch_norm(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    ex = ctx.ex
    args = _call(ex, pc, _BATCH_NORM)
    if len(args) < 10:
        raise _NoMatch
    x, weight, bias, mean, var, _momentum, eps, out, save_mean, save_invstd = args[:10]
    for j in (save_mean, save_invstd):
        _only_readers(ctx, j, pc, pc + 1)
    xa, oa = _flat_f32(ex, x, out)
    if xa.shape != oa.shape or xa.ndim < 2:
        raise _NoMatch
    w, b, m, v = (_constant(ex, j) for j in (weight, bias, mean, var))
    if m is None or v is None:
        raise _NoMatch
    from edgetorch.runtime.kernels.normalization import batch_norm_scale_shift  # its family, only when used

    scale, shift = batch_norm_scale_shift(w, b, m, v, _scalar(ctx, eps), oa.dtype)
    if scale.dtype != _F32 or scale.shape != (xa.shape[1],):
        raise _NoMatch
    lo, hi, length, final = -np.inf, np.inf, 1, oa
    try:
        lo, hi, final = _clamp_after(ctx, pc + 1, out)
        length = 2
    except _NoMatch:
        pass
    if final.shape != xa.shape:
        raise _NoMatch
    _same_or_apart(xa, final)
    nb, c = xa.shape[:2]
    x3, y3 = xa.reshape(nb, c, -1), final.reshape(nb, c, -1)
    lo32, hi32 = np.float32(lo), np.float32(hi)
    if ctx.compiled:
        return length, partial(compiled.kernel("scale_shift_clamp"), x3, scale, shift, lo32, hi32, y3)
    scale3, shift3 = scale[:, None], shift[:, None]
    clamped = length == 2

    def batch_norm() -> None:
        np.multiply(x3, scale3, out=y3)
        np.add(y3, shift3, out=y3)
        if clamped:
            np.clip(y3, lo32, hi32, out=y3)

    return length, batch_norm


def _clamp_after(ctx: _StaticContext, pc: int, source: int) -> tuple[float, float, np.ndarray]:
    """The bounds and output of a ``hardtanh`` or ``relu`` at ``pc`` that is the only reader of ``source``."""
    ex = ctx.ex
    _only_readers(ctx, source, pc - 1, pc + 1)
    if pc not in ctx.live:
        raise _NoMatch
    try:
        args = _call(ex, pc, "aten::hardtanh.out")
        if len(args) != 5 or args[0] != source or args[3] != args[4]:
            raise _NoMatch
        lo, hi, out = _scalar(ctx, args[1]), _scalar(ctx, args[2]), args[3]
    except _NoMatch:
        args = _call(ex, pc, "aten::relu.out")
        if len(args) != 3 or args[0] != source or args[1] != args[2]:
            raise _NoMatch from None
        lo, hi, out = 0.0, np.inf, args[1]
    if not lo <= hi:
        raise _NoMatch  # an empty range: the kernel's own business
    (final,) = _flat_f32(ex, out)
    return lo, hi, final


def _mask_tail(ctx: _StaticContext, pc: int) -> tuple[int, int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The scores and softmax values the zeroing tail at ``pc`` reads (see _MASK_TAIL), and the scores, the
    softmax and the result as [rows, n] float32 arrays; its intermediate values are read only inside it."""
    ex = ctx.ex
    calls: dict[str, list[list[int]]] = {}
    for p in range(pc, pc + _TAIL_LENGTH):
        if p >= len(ex.instructions):
            raise _NoMatch
        a = ex.instructions[p].instr_args
        if not isinstance(a, fbp.KernelCall) or ex.operators[a.op_index] not in _MASK_TAIL:
            raise _NoMatch
        nargs = ex.kernels[a.op_index][1]
        if len(a.args) != nargs + 1 or a.args[-1] != a.args[nargs - 1]:
            raise _NoMatch  # the out argument, then the same value as the result
        calls.setdefault(ex.operators[a.op_index], []).append(list(a.args[:nargs]))
    if {name: len(c) for name, c in calls.items()} != _MASK_TAIL:
        raise _NoMatch
    if not all(p in ctx.live or ex.operators[ex.instructions[p].instr_args.op_index] == "aten::full_like.out"
               for p in range(pc, pc + _TAIL_LENGTH)):  # fmt: skip
        raise _NoMatch  # only the zeros may have been folded
    ((x, inf, e),) = calls["aten::eq.Scalar_out"]
    ((ne, dim, keep, a),) = calls["aten::any.out"]
    ((m, z, s, r),) = calls["aten::where.self_out"]
    if sorted(map(tuple, calls["aten::logical_not.out"])) != sorted([(e, ne), (a, m)]):
        raise _NoMatch
    if z != calls["aten::full_like.out"][0][-1] or ex.bound[inf] != -np.inf or ex.bound[keep] is not True:
        raise _NoMatch
    xa, sa, ra = _flat_f32(ex, x, s, r)
    if not xa.shape == sa.shape == ra.shape or xa.ndim < 1 or _int(ctx, dim) % xa.ndim != xa.ndim - 1:
        raise _NoMatch
    zeros = ex.bound[z]
    if not isinstance(zeros, np.ndarray) or zeros.shape != xa.shape or np.any(zeros):
        raise _NoMatch  # full_like(0) folded to a constant at load
    _same_or_apart(xa, ra)
    _same_or_apart(sa, ra)
    for j in (e, ne, a, m, z):
        _only_readers(ctx, j, pc, pc + _TAIL_LENGTH)
    n = xa.shape[-1]
    return x, s, (xa.reshape(-1, n), sa.reshape(-1, n), ra.reshape(-1, n))


def _safe_softmax(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """softmax(x) then the zeroing tail: the compiled softmax with ``safe``, straight into the tail's result."""
    ex = ctx.ex
    x, dim, half, s = _call(ex, pc, "aten::_softmax.out")[:4]
    if not ctx.compiled or ex.bound[half] not in (False, 0):
        raise _NoMatch
    tail_x, tail_s, (scores, _, result) = _mask_tail(ctx, pc + 1)
    if (tail_x, tail_s) != (x, s) or _int(ctx, dim) % ex.bound[x].ndim != ex.bound[x].ndim - 1:
        raise _NoMatch
    _only_readers(ctx, s, pc, pc + 1 + _TAIL_LENGTH)
    return 1 + _TAIL_LENGTH, _rows(ctx, "softmax", scores, result, True)


def _masked_rows(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """The zeroing tail alone (the softmax ran elsewhere, e.g. in a delegate): one compiled pass."""
    if not ctx.compiled:
        raise _NoMatch
    _, _, rows = _mask_tail(ctx, pc)
    return _TAIL_LENGTH, partial(compiled.kernel("masked_rows"), *rows)


def _addmm(ctx: _StaticContext, pc: int) -> tuple[int, int, int, int]:
    """The bias, input, weight and result of ``addmm.out`` at ``pc`` when it is ``bias + input @ weight``
    (beta and alpha 1)."""
    args = _call(ctx.ex, pc, "aten::addmm.out")
    if len(args) != 7:
        raise _NoMatch
    bias, a, w, beta, alpha, out = args[:6]
    if _scalar(ctx, beta) != 1 or _scalar(ctx, alpha) != 1:
        raise _NoMatch
    return bias, a, w, out


def _linear_epilogue(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """``addmm(bias, x, w)`` then a GELU or a residual add of its result: the matrix product into the
    addmm's memory, then one compiled pass adds the bias and applies the GELU (``bias_gelu``) or the residual
    (``bias_add``), with the same float32 operations in the same order as the two kernels."""
    ex = ctx.ex
    bias, a, w, out = _addmm(ctx, pc)
    (product,) = _flat_f32(ex, out)
    lhs, rhs, b = ex.bound[a], ex.bound[w], _constant(ex, bias)
    if b is None or not all(isinstance(t, np.ndarray) and t.dtype == _F32 for t in (lhs, rhs, b)):
        raise _NoMatch
    if product.ndim != 2 or b.shape != (product.shape[1],) or lhs.ndim != 2 or rhs.ndim != 2:
        raise _NoMatch
    seen = {out} | ctx.views.get(out, set())  # the product as the next instruction may name it
    outside = set(ex.plan.inputs) | set(ex.plan.outputs)  # the product is a view base: its views are in seen
    for j in seen:
        _only_readers(ctx, j, pc, pc + 2, outside)
    nxt = pc + 1
    following = ex.instructions[nxt].instr_args if nxt in ctx.live else None
    name = ex.operators[following.op_index] if isinstance(following, fbp.KernelCall) else ""
    if name == "aten::gelu.out":
        x, approximate, result = _call(ex, nxt, name)[:3]
        if x not in seen or ex.bound[approximate] not in ("none", "tanh") or not ctx.compiled:
            raise _NoMatch
        (y,) = _flat_f32(ex, result)
        if y.size != product.size:
            raise _NoMatch
        _same_or_apart(product, y)
        epilogue = ops_epilogue.bias_gelu(product, b, y.reshape(product.shape), ex.bound[approximate], ctx.packing)
    elif name == "aten::add.out":
        first, second, add_alpha, result = _call(ex, nxt, name)[:4]
        if not ctx.compiled or _scalar(ctx, add_alpha) != 1 or (first in seen) == (second in seen):
            raise _NoMatch
        residual, y = _flat_f32(ex, second if first in seen else first, result)
        if not residual.size == y.size == product.size:
            raise _NoMatch
        _same_or_apart(product, y)
        _same_or_apart(residual, y)
        residual2 = residual.reshape(product.shape)
        epilogue = ops_epilogue.bias_residual(product, b, residual2, y.reshape(product.shape), ctx.packing)
    else:
        raise _NoMatch
    matmul = _packed(ctx, lhs, w, product, pc=pc) or partial(np.matmul, lhs, rhs, out=product)
    return 2, partial(_in_turn, matmul, epilogue)


def _in_turn(first: Callable, then: Callable) -> None:
    first()
    then()


def _packed(
    ctx: _StaticContext, lhs: np.ndarray, w: int, out: np.ndarray, bias: np.ndarray | None = None, pc: int = -1
) -> Callable | None:
    """The step ``out = lhs @ w + bias`` when value ``w`` is a 2-D float32 constant and the method's packing
    budget allows: the packed GEMM, or sgemm where the host measured it faster (gemm.choose_linear); else None
    (the caller keeps sgemm)."""
    try:
        rhs = _constant(ctx.ex, w)
    except _NoMatch:
        return None
    if rhs is None or rhs.dtype != _F32 or rhs.ndim != 2 or not ctx.packing or np.shares_memory(lhs, out):
        return None
    if lhs.ndim != 2 or out.shape != (lhs.shape[0], rhs.shape[1]) or lhs.shape[1] != rhs.shape[0]:
        return None
    if not compiled.flat_float32(out):
        return None
    packed = gemm.PackedGemm(rhs, bias)
    kernel = gemm.choose_linear(packed, rhs, lhs.shape[0], f"instruction {pc}").kernel
    if kernel == "sgemm":
        return blas_threads.widened(gemm.sgemm_step(lhs, rhs, bias, -np.inf, np.inf, out), out.size * lhs.shape[1])
    return packed.step(lhs, out, kernel)


def _rows(ctx: _StaticContext, name: str, *args: Any) -> Callable:
    """The compiled row kernel ``name`` bound to ``args`` (the tier must be on): split over numba's threads
    (compiled.rows_step) in a method whose products run there (``ctx.packing``), else on the calling thread."""
    return compiled.rows_step(name, *args, split=ctx.packing)


def _products(ex: Any) -> tuple[int, int, int]:
    """Multiply-adds of the method's ``addmm``/``mm`` calls on constant float32 weights and of its convolutions,
    at the planned shapes, and the bytes of those weights (what packing them all would copy)."""
    linear = convolutions = constant_bytes = 0
    for pc in ex.step_pcs:
        a = ex.instructions[pc].instr_args
        name = ex.operators[a.op_index] if isinstance(a, fbp.KernelCall) else ""
        if name in ("aten::addmm.out", "aten::mm.out") and len(a.args) >= (6 if name == "aten::addmm.out" else 3):
            w, out = (a.args[2], a.args[5]) if name == "aten::addmm.out" else (a.args[1], a.args[2])
            slot, wv, ov = ex.slots.get(w), ex.bound[w], ex.bound[out]
            if slot is not None and slot.constant and isinstance(wv, np.ndarray) and wv.dtype == _F32 and wv.ndim:
                linear += (ov.size if isinstance(ov, np.ndarray) else 0) * wv.shape[0]
                constant_bytes += wv.nbytes
        elif name == "aten::expand_copy.out" and len(a.args) >= 4:  # a weight _expanded_linear may pack
            slot, wv, ov = ex.slots.get(a.args[0]), ex.bound[a.args[0]], ex.bound[a.args[3]]
            if slot is not None and slot.constant and isinstance(wv, np.ndarray) and wv.dtype == _F32 and wv.ndim == 2:
                constant_bytes += wv.nbytes
        elif name == "aten::convolution.out" and len(a.args) >= 10:
            wv, ov = ex.bound[a.args[1]], ex.bound[a.args[9]]
            if isinstance(wv, np.ndarray) and isinstance(ov, np.ndarray) and wv.ndim:
                convolutions += ov.size * (wv.size // max(1, wv.shape[0]))
    return linear, convolutions, constant_bytes


def _packed_linear(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """``addmm(bias, x, w)`` or ``mm(x, w)`` on a constant ``w`` (and a constant bias of one row): one packed-GEMM
    step with the bias in its pass (``_packed``). A ReLU after it stays a step: the ctx gives the ReLU's output
    the memory of the layer's input, which the GEMM reads while it writes."""
    ex = ctx.ex
    try:
        bias, a, w, out = _addmm(ctx, pc)
        b = _constant(ex, bias)
        if b is None or b.dtype != _F32 or b.ndim > 2 or b.size != b.shape[-1]:
            raise _NoMatch
    except _NoMatch:
        args = _call(ex, pc, "aten::mm.out")
        if len(args) != 4:
            raise _NoMatch from None
        a, w, out, b = args[0], args[1], args[2], None
    lhs = ex.bound[a]
    if not isinstance(lhs, np.ndarray) or lhs.dtype != _F32:
        raise _NoMatch
    (product,) = _flat_f32(ex, out)
    if b is not None and b.size != product.shape[-1]:
        raise _NoMatch
    step = _packed(ctx, lhs, w, product, b, pc)
    if step is None:
        raise _NoMatch
    return 1, step


def _expanded_linear(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """``expand_copy`` of a constant [K, N] weight to [B, K, N], then ``bmm(x, it)``: the linear layer torch's
    decomposition writes for a 3-D input it cannot flatten (MiniLM's attention output projection). One packed
    GEMM over x's B x M rows instead: no B copies of the weight a call (6 x 4.7 MB a MiniLM run), no packing
    per call."""
    ex = ctx.ex
    args = _call(ex, pc, "aten::expand_copy.out")
    if len(args) < 4 or pc + 1 not in ctx.live:
        raise _NoMatch
    w, expanded = args[0], args[3]
    weight = _constant(ex, w)
    if weight is None or weight.ndim != 2 or weight.dtype != _F32:
        raise _NoMatch
    x, e, result = _call(ex, pc + 1, "aten::bmm.out")[:3]
    seen = {expanded} | ctx.views.get(expanded, set())  # the expansion as the bmm may name it
    if e not in seen or x in seen:
        raise _NoMatch
    outside = set(ex.plan.inputs) | set(ex.plan.outputs)
    for j in seen:
        _only_readers(ctx, j, pc, pc + 2, outside)
    xa, ya = _flat_f32(ex, x, result)
    (k, n), rows = weight.shape, xa.size // max(1, weight.shape[0])
    if xa.ndim != 3 or xa.shape[-1] != k or ya.shape != xa.shape[:-1] + (n,) or np.shares_memory(xa, ya):
        raise _NoMatch
    step = _packed(ctx, xa.reshape(rows, k), w, ya.reshape(rows, n), pc=pc)
    if step is None:
        raise _NoMatch
    return 2, step


def _max_pool_values(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """``max_pool2d_with_indices`` whose indices nothing reads: the op layer's max pooling alone, without the
    passes that find each window's winning index (both tiers; the same values)."""
    ex = ctx.ex
    args = _call(ex, pc, "aten::max_pool2d_with_indices.out")
    if len(args) < 9:  # the arguments, then the results (one list value, or the two tensors)
        raise _NoMatch
    x, kernel_size, stride, padding, dilation, ceil_mode, out, indices = args[:8]
    _only_readers(ctx, indices, pc, pc + 1)
    xa, oa = ex.bound[x], ex.bound[out]
    if not isinstance(xa, np.ndarray) or not isinstance(oa, np.ndarray) or xa.dtype != oa.dtype:
        raise _NoMatch
    if xa.dtype.kind != "f" or np.shares_memory(xa, oa):
        raise _NoMatch
    kernel, strides, pads, dilations = (ex._arg(j) for j in (kernel_size, stride, padding, dilation))
    kernel, dilations, pads = expand(kernel, 2), expand(dilations, 2), expand(pads, 2)
    strides = expand(strides or kernel, 2)
    rewrite_checks.window("aten::max_pool2d_with_indices.out", kernel, strides, pads, dilations)
    sizes = [
        window.output_size(n, k, s, p, p, dl, bool(ex.bound[ceil_mode]))
        for n, k, s, p, dl in zip(xa.shape[-2:], kernel, strides, pads, dilations)
    ]
    if xa.ndim < 3 or oa.shape != xa.shape[:-2] + tuple(sizes):
        raise _NoMatch
    steps = ops_pool.max_pool(xa, oa, kernel, strides, [(p, p) for p in pads], dilations, "NCHW")
    if len(steps) != 1:
        raise _NoMatch
    return 1, steps[0]


_UFUNCS = {
    "aten::add.out": np.add,
    "aten::sub.out": np.subtract,
    "aten::mul.out": np.multiply,
    "aten::div.out": np.divide,
    "aten::mul.Scalar_out": np.multiply,
    "aten::div.Scalar_out": np.divide,
}


def _direct(ctx: _StaticContext, pc: int) -> tuple[int, Callable]:
    """A float32 kernel call whose shapes the method's plan fixes, bound straight to the NumPy ufunc, matmul or compiled
    kernel the portable kernel would reach after its checks, shape and dtype work; the same call, so the
    same bits."""
    ex = ctx.ex
    a = ex.instructions[pc].instr_args
    if not isinstance(a, fbp.KernelCall):
        raise _NoMatch
    name = ex.operators[a.op_index]
    args = list(a.args)
    if name in _UFUNCS:
        with_alpha = name in ("aten::add.out", "aten::sub.out")
        if len(args) != (5 if with_alpha else 4) or (with_alpha and _scalar(ctx, args[2]) != 1):
            raise _NoMatch
        x, y, out = args[0], args[1], args[-2]
        (xa, oa) = _f32_arrays(ex, x, out)
        if name.endswith("Scalar_out"):
            operand: Any = np.float32(_scalar(ctx, y))
            shape = xa.shape
        else:
            (operand,) = _f32_arrays(ex, y)
            shape = rewrite_checks.broadcast(name, xa.shape, operand.shape)
        if shape != oa.shape or oa.ndim == 0:
            raise _NoMatch
        return 1, partial(_UFUNCS[name], xa, operand, out=oa)
    if name in ("aten::bmm.out", "aten::mm.out"):
        if len(args) != 4:
            raise _NoMatch
        xa, ya, oa = _f32_arrays(ex, args[0], args[1], args[2])
        rewrite_checks.matmul(name, xa.shape, ya.shape)
        if xa.ndim != oa.ndim or xa.shape[:-1] != oa.shape[:-1] or ya.shape[-1] != oa.shape[-1]:
            raise _NoMatch
        batched = gemm.batch_matmul(xa, ya, oa) if ctx.packing and name == "aten::bmm.out" else None
        return 1, batched or partial(np.matmul, xa, ya, out=oa)
    if name == "aten::native_layer_norm.out":
        return 1, _layer_norm(ctx, args)
    if name == "aten::gelu.out" and len(args) == 4 and ctx.compiled:
        approximate = ex.bound[args[1]]
        xa, oa = _flat_f32(ex, args[0], args[2])
        if approximate not in ("none", "tanh") or xa.shape != oa.shape:
            raise _NoMatch
        _same_or_apart(xa, oa)
        return 1, activation.gelu(xa, oa, approximate, split=ctx.packing)
    raise _NoMatch


def _f32_arrays(ex: Any, *values: int) -> list[np.ndarray]:
    """The float32 arrays of ``values`` (planned, or constants)."""
    arrays = [ex.bound[j] for j in values]
    if not all(isinstance(t, np.ndarray) and t.dtype == _F32 for t in arrays):
        raise _NoMatch
    return arrays


def _layer_norm(ctx: _StaticContext, args: list[int]) -> Callable:
    """native_layer_norm straight to the compiled kernel, its mean and rstd written into their outs."""
    ex = ctx.ex
    if not ctx.compiled or len(args) < 9:
        raise _NoMatch
    x, shape, weight, bias, eps, out, mean, rstd = args[:8]
    xa, oa, ma, ra = _flat_f32(ex, x, out, mean, rstd)
    inner = math.prod(ex._arg(shape))
    if xa.shape != oa.shape or inner == 0 or xa.size % inner or ma.size * inner != xa.size or ra.size != ma.size:
        raise _NoMatch
    none = np.empty(0, _F32)
    w, b = (none if ex.bound[j] is None else _f32_arrays(ex, j)[0].reshape(-1) for j in (weight, bias))
    if w.size not in (0, inner) or b.size not in (0, inner) or not compiled.flat_float32(w, b):
        raise _NoMatch
    rows = xa.size // inner
    return _rows(
        ctx, "layer_norm", xa.reshape(rows, inner), w, b, _F32.type(_scalar(ctx, eps)), oa.reshape(rows, inner),
        ma.reshape(-1), ra.reshape(-1),
    )  # fmt: skip
