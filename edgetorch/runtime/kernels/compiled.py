"""The optional compiled tier of the kernels (numba, ``pip install edgetorch[fast]``): exp-bound formulas that
NumPy runs as many passes, compiled once and cached on disk. Shared by the portable kernels and the backends'
runtime halves (``edgetorch/backends/xnnpack/fast.py`` compiles through :func:`compiled`).

NumPy's float32 ``exp`` costs as much as several simple passes, and GELU needs erfc on top of it: tens of
passes through memory. Each kernel below makes one pass with its own float32 exp (a degree-6 polynomial after
reduction by ln 2, within 1 ulp, faster than NumPy's: docs/benchmarks.md, "Figures behind the code"), so its
results equal the NumPy path's within float32 rounding, not bit for bit.

Used when the runtime's policy allows the tier (edgetorch/runtime/policy.py: numba imports and
``EDGETORCH_FAST`` is not ``0``); otherwise :func:`compiled` returns None and every caller keeps its NumPy
path. Imports only NumPy and the policy (and numba on the first compile).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import types
from collections.abc import Iterable
from functools import partial
from typing import Any

import numpy as np

from edgetorch.runtime import policy
from edgetorch.runtime.ops.numeric import ERFC_EXPONENT

_compiled: dict[str, Any] = {}  # the compiled kernels by name


class _Compiling:
    """Counts numba's compilations in this process (cache misses: a kernel loaded from numba's on-disk cache is
    not one) and says so on standard error when the first begins, so that a first run's pause of several
    seconds is explained."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        self.listening = False
        self._open: list[float] = []

    def listen(self, event_module: Any) -> None:
        """Register with numba's event API (``numba:compile`` events, begin and end of each compilation)."""
        compiling = self

        class Listener(event_module.Listener):
            def on_start(self, event: Any) -> None:
                compiling.begin()

            def on_end(self, event: Any) -> None:
                compiling.end()

        event_module.register("numba:compile", Listener())
        self.listening = True

    def begin(self) -> None:
        if self.count == 0 and not self._open:
            print(
                "edgetorch: compiling the fast tier's kernels for this machine; this happens once, numba keeps "
                "them on disk (`edgetorch warmup PROGRAM` does it ahead of time)",
                file=sys.stderr,
                flush=True,
            )
        self._open.append(time.perf_counter())

    def end(self) -> None:
        if self._open:
            begun = self._open.pop()
            if not self._open:  # a kernel's helpers compile inside it: the outermost counts once
                self.count += 1
                self.seconds += time.perf_counter() - begun


COMPILING = _Compiling()


def set_num_threads(n: int) -> None:
    """Use up to ``n`` threads in the kernels that split their work (with the [fast] tier: the packed float32
    GEMM, the XNNPACK delegate's depthwise convolutions and integer GEMVs), as ``torch.set_num_threads`` does for PyTorch. Takes effect at the next call of such a
    kernel, in every loaded method; 1 runs everything on the calling thread. Raises
    :class:`~edgetorch.errors.InvalidArgumentError` for anything but a positive integer."""
    policy.install(dataclasses.replace(policy.current(), threads=policy.checked_threads(n, "set_num_threads")))


def get_num_threads() -> int:
    """The threads kernels may use: the last :func:`set_num_threads`, else ``EDGETORCH_NUM_THREADS``, else the
    CPUs this process may run on (``os.sched_getaffinity``)."""
    return policy.current().thread_count()


# Whether kernels split across threads: None until the first split, then False if numba's threading layer is its
# workqueue (its fallback without OpenMP or TBB), which aborts the process when two threads launch parallel loops
# at once and wakes its threads far slower (docs/benchmarks.md, "Figures behind the code").
SPLITS: bool | None = None


def _threading_layer() -> str | None:
    """numba's threading layer, or None while numba has not started one: a parallel kernel loaded from numba's
    cache may run its loop before numba records the layer, and ``numba.threading_layer()`` then raises."""
    import numba

    try:
        return str(numba.threading_layer())
    except ValueError:
        return None


def split(serial: Any, parallel: Any, limit: int) -> None:
    """Run ``parallel(parts)`` with a part a thread (at most ``limit`` parts), or ``serial()``: the one way the
    kernels that split their work (gemm.py, the XNNPACK delegate's depthwise convolution and integer GEMVs)
    decide at each call. Serial with one thread (:func:`get_num_threads`) or when numba's threading layer is its
    workqueue (``SPLITS``); otherwise, under the policy's ``split_adapts``, whichever variant has been faster at
    this call site (a :class:`~edgetorch.runtime.policy.SplitChoice` kept on ``parallel``): on a busy machine a
    split waits for threads the OS has descheduled and the site runs serially until a later trial finds the
    threads fast again, so that N threads are not slower than one.

    numba's own thread count is left alone: calling ``numba.set_num_threads`` with the parts (to wake no more of
    its threads than there are parts, on a machine of many cores) made SmolLM2's decode slower on 2 cores,
    though it set the count numba had (docs/benchmarks.md, "Figures behind the code")."""
    global SPLITS
    mode = policy.current()
    threads = mode.thread_count()
    if threads < 2 or SPLITS is False:
        serial()
        return
    choice = _choice(parallel) if mode.split_adapts else None
    if choice is None:
        parallel(min(threads, limit))
    else:
        start = time.perf_counter_ns()
        parallel_now = choice.next_parallel(start)
        if parallel_now:
            parallel(min(threads, limit))
        else:
            serial()
        end = time.perf_counter_ns()
        choice.record(parallel_now, end - start, end)
        if not parallel_now:
            return
    if SPLITS is None:  # the first parallel loop of the process chose numba's layer
        layer = _threading_layer()
        SPLITS = None if layer is None else layer != "workqueue"


def _choice(parallel: Any) -> policy.SplitChoice | None:
    """The call site's record, kept as an attribute of its ``parallel`` callable (a bound ``partial``, one per
    site, which dies with the site); None where the callable takes no attributes (the site then always splits)."""
    try:
        return parallel.edgetorch_split  # type: ignore[no-any-return]
    except AttributeError:
        pass
    choice = policy.SplitChoice()
    try:
        parallel.edgetorch_split = choice
    except (AttributeError, TypeError):
        return None
    return choice


def split_step(serial: Any, parallel: Any, args: tuple, limit: int, worth: bool) -> Any:
    """The step of a kernel that may split: ``serial`` (a bound call) where splitting is not ``worth`` it (too
    little work), else the call of :func:`split` choosing at each call between it and ``parallel`` bound to
    ``args`` (the parts come last), over at most ``limit`` parts."""
    return partial(split, serial, partial(parallel, *args), limit) if worth else serial


def part_split_step(name: str, split_form: Any, part: Any, whole: tuple, shared: tuple, limit: int, worth: bool) -> Any:
    """:func:`split_step` for a kernel whose threads each run a part of the work by a serial kernel ``part``
    called at its :func:`address`: serially, ``part`` on ``whole`` (its arguments for all of the work);
    split, ``split_form`` (compiled with numba's threads under ``name``) on that address, then ``shared``, then
    the part count. The address is of ``part``'s build for ``whole``'s types, which ``split_form`` must pass."""
    parallel = compiled(name, split_form, parallel=True)
    return split_step(partial(part, *whole), parallel, (address(part, *whole), *shared), limit, worth)


def splits(step: Any) -> bool:
    """Whether ``step`` is a call of :func:`split` (it may run numba's threads)."""
    return isinstance(step, partial) and step.func is split


# The kernels of the packed GEMM family (gemm.py's GEMM, winograd.py's convolution), by their names here: a step
# that calls one claims the cores for numba's threads even when this call stays on the calling thread.
_GEMM_FAMILY = ("edgetorch.runtime.kernels.gemm._gemm_blocks", "winograd")


def own_threads(steps: Iterable[Any]) -> bool:
    """Whether NumPy's BLAS keeps to one thread while ``steps`` run (blas_threads.held): one of them may run
    numba's threads (:func:`splits`) or calls a kernel of the packed GEMM family; a step that runs others in
    turn (a ``partial`` of steps) is looked into. The one rule of the portable runtime's methods and of the
    XNNPACK delegate, derived from the steps themselves, not recorded as they are built."""
    family = {id(got) for got in map(_compiled.get, _GEMM_FAMILY) if got is not None}

    def claims(step: Any, depth: int) -> bool:  # a loop, not any() of a generator: it runs once a step per schedule
        if id(getattr(step, "func", None)) in family or splits(step):
            return True
        if depth < 4 and isinstance(step, partial):
            for a in step.args:
                if callable(a) and claims(a, depth + 1):
                    return True
        return False

    for step in steps:
        if claims(step, 0):
            return True
    return False


def compiled(name: str, fn: Any, **options: Any) -> Any:
    """``fn`` compiled with numba and kept under ``name``, or None when the tier is not usable.

    Compiled on first use (about a second a kernel), then loaded from numba's on-disk cache. ``options`` go to
    ``numba.njit``; with ``parallel=True`` its ``prange`` loops run on numba's threads (the OpenMP layer here),
    which pays off from some microseconds of work a call: where each kernel family starts splitting is a field
    of the runtime's policy (policy.py), measured per family (docs/benchmarks.md).
    """
    if not policy.compiled_tier():
        return None
    got = _compiled.get(name)
    if got is None:
        import numba
        import numba.core.event

        if not COMPILING.listening:
            COMPILING.listen(numba.core.event)
        if options.get("parallel"):
            fn = _parallel_twin(fn)
        try:
            got = numba.njit(cache=True, nogil=True, **options)(fn)
        except RuntimeError:  # no writable cache location (read-only install, no home, NUMBA_CACHE_DIR unusable)
            _no_cache_notice()
            got = numba.njit(nogil=True, **options)(fn)
        _compiled[name] = got
    return got


def _parallel_twin(fn: Any) -> Any:
    """``fn`` under a name of its own for its ``parallel=True`` build. numba's disk cache keys a function's
    builds by its module, name, line, signature and bytecode, not by the options, so a kernel compiled both
    serially and with numba's threads (gemm's ``_bmm``) would otherwise load whichever build was saved last for
    both."""
    twin = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    twin.__qualname__ = f"{fn.__qualname__}_threaded"
    twin.__module__, twin.__doc__ = fn.__module__, fn.__doc__
    return twin


_told_no_cache = False


def _no_cache_notice() -> None:
    global _told_no_cache
    if not _told_no_cache:
        _told_no_cache = True
        print(
            "edgetorch: numba found no writable cache directory; the fast tier's kernels are compiled again in "
            "every process (set NUMBA_CACHE_DIR to a writable directory to keep them)",
            file=sys.stderr,
            flush=True,
        )


def address(kernel: Any, *args: Any) -> int:
    """Where the build of the compiled ``kernel`` for these arguments' types starts (compiled now, or loaded
    from numba's cache, if it was not yet), for another kernel to call it through
    ``call_at(kernel, address, (args,))`` (:class:`Helpers` binds ``call_at``), with arguments of the same
    types (``call_at`` refuses to compile otherwise).

    numba links a callee's code into every kernel that calls it and optimises and compiles it there again;
    called at an address, a large kernel (the fused block's band) is compiled once, not again in each of the
    libraries a ``parallel=True`` build is made of. An address, unlike a link, is passed at each call, so the
    caller's build stays valid in numba's cache across processes."""
    import numba

    signature = tuple(map(numba.typeof, args))
    kernel.compile(signature)
    built = kernel.overloads[signature]
    return int(built.library.get_pointer_to_function(built.fndesc.mangled_name))


def _call_at() -> Any:
    """``call_at(kernel, address, args)``, a numba intrinsic: the call of the compiled ``kernel`` at
    ``address`` (an integer, from :func:`address`) on the members of the tuple ``args``, with numba's calling
    convention; an exception the kernel raises is the caller's. A caller whose arguments are not the types of
    a build of ``kernel`` (the one :func:`address` made) fails to compile, rather than call it wrongly."""
    from numba import types
    from numba.core.errors import TypingError
    from numba.extending import intrinsic

    @intrinsic
    def call_at(typingctx, kernel, where, args):
        if not isinstance(kernel, types.Dispatcher) or not isinstance(where, types.Integer):
            return None
        if not isinstance(args, types.BaseTuple):
            return None
        if tuple(map(types.unliteral, args.types)) not in kernel.dispatcher.overloads:
            raise TypingError(
                f"call_at: expected the types of a build of {kernel.dispatcher.py_func.__qualname__} "
                f"({', '.join(map(str, kernel.dispatcher.signatures))}), found {args}; make the caller pass "
                "the arguments address() was given"
            )

        def codegen(context, builder, signature, values):
            kinds = [types.unliteral(t) for t in args.types]  # a constant argument as its type's value
            members = [
                context.cast(builder, builder.extract_value(values[2], n), t, kind)
                for n, (t, kind) in enumerate(zip(args.types, kinds))
            ]
            entry = builder.inttoptr(values[1], context.call_conv.get_function_type(types.void, kinds).as_pointer())
            status, _ = context.call_conv.call_function(builder, entry, types.void, kinds, members)
            with builder.if_then(status.is_error, likely=False):
                context.call_conv.return_status_propagate(builder, status)
            return context.get_dummy_value()

        return types.void(kernel, where, args), codegen

    return call_at


def ir_helpers(builder: Any, vec: Any, intp: Any) -> tuple[Any, Any, Any]:
    """The IR the kernels' LLVM intrinsics (gemm.py's, depthwise.py's, winograd.py's) build with ``builder`` for
    vectors of type ``vec``: an ``intp`` constant, a ``vec`` pointer ``at`` floats past a float pointer, and a
    vector of one float in every lane."""
    from llvmlite import ir

    i32 = ir.IntType(32)
    undef = ir.Constant(vec, ir.Undefined)
    lane0 = ir.Constant(ir.VectorType(i32, vec.count), [ir.Constant(i32, 0)] * vec.count)

    def const(v: int) -> Any:
        return ir.Constant(intp, v)

    def vector(data: Any, at: Any) -> Any:
        return builder.bitcast(builder.gep(data, [at], inbounds=True), vec.as_pointer())

    def splat(s: Any) -> Any:
        return builder.shuffle_vector(builder.insert_element(undef, s, ir.Constant(i32, 0)), undef, lane0)

    return const, vector, splat


def kernel_if_loaded(name: str) -> Any:
    """:func:`kernel` ``name`` when numba is already imported (another kernel of the program needed it), else
    None: for a kernel whose gain is smaller than what importing numba costs a process (~150 MB resident)."""
    return kernel(name) if policy.compiled_tier_loaded() else None


def flat_float32(*arrays: np.ndarray | None) -> bool:
    """Whether the kernels here can take these arrays (None: absent) as they are: float32 and C-contiguous,
    so that their reshapes are views."""
    return all(a is None or (a.dtype == np.float32 and a.flags.c_contiguous) for a in arrays)


def kernel(name: str) -> Any:
    """The compiled kernel ``name`` of this module (``gelu``, ``gelu_tanh``, ``softmax``, ``layer_norm``,
    ``rms_norm``, ``swiglu``, ``decode_attention``, ``depthwise3x3``, ``scale_shift_clamp``, ``bias_clamp``, ``masked_rows``, ``bias_gelu``,
    ``bias_add``), or None without the tier."""
    if not HELPERS.ready():
        return None
    fn, options = _KERNELS[name]
    return compiled(name, fn, **options)


class Helpers:
    """The module globals that one module's compiled kernels call, made compiled on the module's first use of
    the tier: numba resolves the globals a kernel names when it compiles it, so a helper must be compiled (or an
    intrinsic, or numba's ``prange``) by then, and importing the module must not import numba. Each kernel
    module declares its helpers once with this, and asks :meth:`ready` (the tier switch and the binding in one
    call) before it builds a compiled step; no module rebinds its own globals.

    ``namespace`` is the module's ``globals()``. Its ``prange`` (if it has one) becomes numba's, its
    ``call_at`` the intrinsic that calls a kernel at an :func:`address`; the names in
    ``inline`` become numba functions inlined into their callers (with ``inline_options``); the names in
    ``compile`` are compiled (:func:`compiled`, kept under the module's and the helper's name); each ``build``
    entry sets its name to what its function returns (an intrinsic, or a kernel of another module). ``after``:
    the helpers of modules whose compiled globals these take, made ready first."""

    def __init__(
        self,
        namespace: dict[str, Any],
        compile: Iterable[str] = (),
        inline: Iterable[str] = (),
        inline_options: dict[str, Any] | None = None,
        build: dict[str, Any] | None = None,
        after: Iterable[Helpers] = (),
    ) -> None:
        self.namespace = namespace
        self.compile, self.inline = tuple(compile), tuple(inline)
        self.inline_options = dict(inline_options or {})
        self.build = dict(build or {})
        self.after = tuple(after)
        self.bound = False

    def ready(self) -> bool:
        """Whether the compiled tier is usable (:func:`~edgetorch.runtime.policy.compiled_tier`); when it is,
        the module's helpers are compiled and bound (once per process)."""
        if not policy.compiled_tier():
            return False
        if not self.bound:
            import numba

            for other in self.after:
                other.ready()
            space = self.namespace
            if "prange" in space:
                space["prange"] = numba.prange
            if "call_at" in space:
                space["call_at"] = _call_at()
            inline = numba.njit(cache=True, nogil=True, inline="always", **self.inline_options)
            for name in self.inline:
                space[name] = inline(space[name])
            for name in self.compile:
                space[name] = compiled(f"{space['__name__']}.{name}", space[name])
            for name, make in self.build.items():
                space[name] = make()
            self.bound = True
        return True

    def require(self, what: str) -> None:
        """Make the helpers ready, or raise :class:`~edgetorch.runtime.policy.TierOffError` naming ``what``
        (the step builder asked): a builder's None then only ever means "not these arrays"."""
        if not self.ready():
            raise policy.TierOffError(
                f"{what}: expected the compiled tier to be on (numba importable, Policy.compiled, EDGETORCH_FAST "
                "not 0), found it off; ask edgetorch.runtime.policy.compiled_tier() before building a compiled step"
            )


# ------------------------------------------------------------------------------------------------ kernels

_LOG2E = 1.4426950408889634
_LN2_HI, _LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = hi + lo; n * hi is exact for the n that occur
_EXP_MIN = -87.33  # below this exp(v) is under float32's smallest normal: the kernels take it as 0


def _exp(v):  # pragma: no cover - compiled
    """exp(v) for float32 ``v`` in [_EXP_MIN, 88.3] (where 2^n is a normal float): e^v = 2^n * e^r with
    n = round(v / ln 2), |r| <= ln2 / 2, e^r = 1 + r + r^2 q(r) with q Cephes' expf fit (degree 5), 2^n built
    in the exponent bits; within 1 ulp over the range (checked against float64 on 2M points)."""
    f = np.float32
    n = np.rint(v * f(_LOG2E))
    r = (v - n * f(_LN2_HI)) - n * f(_LN2_LO)
    r2 = r * r  # Estrin's scheme: a shorter dependency chain than Horner's, the same < 1 ulp
    q = f(5.0000001201e-1) + f(1.6666665459e-1) * r
    q += r2 * (f(4.1665795894e-2) + f(8.3334519073e-3) * r)
    q += r2 * r2 * (f(1.3981999507e-3) + f(1.9875691500e-4) * r)
    p = q * r2 + r + f(1)
    return p * np.int32((np.int32(n) + np.int32(127)) << np.int32(23)).view(np.float32)


# erfc of the GELUs: the float32 fit both tiers use (ops/numeric.py).
_C = tuple(np.float32(c) for c in ERFC_EXPONENT)


def _gelu_one(v):  # pragma: no cover - compiled
    """x * Phi(x) = max(x, 0) - |x| * erfc(|x| / sqrt2) / 2 for one float32 ``v``."""
    f = np.float32
    a = abs(v)
    t = f(1) / (f(1) + a * f(0.5 / math.sqrt(2)))
    t2 = t * t  # the fit by Estrin's scheme: a dependency chain 4 deep instead of Horner's 9
    t4 = t2 * t2
    low = (_C[0] + _C[1] * t) + t2 * (_C[2] + _C[3] * t)
    high = (_C[4] + _C[5] * t) + t2 * (_C[6] + _C[7] * t)
    p = low + t4 * high + t4 * t4 * (_C[8] + _C[9] * t)
    e = p - v * v * f(0.5)
    tail = a * f(0.5) * t * _exp(max(e, f(_EXP_MIN)))
    return (v if v > f(0) else f(0)) - (f(0) if e < f(_EXP_MIN) else tail)


def _gelu(x, out):  # pragma: no cover - compiled
    """out = x * Phi(x) over the 1-D float32 ``x`` (may be ``out``). A NaN stays NaN; +-inf give inf and 0.

    In place, the loop names one array: a loop over two arrays that may overlap is not vectorised (the compiler
    checks at run time that they are apart, and falls back to one element at a time when they are the same:
    several times slower). The same holds for every kernel here that may run in place."""
    if x.ctypes.data == out.ctypes.data:
        for i in range(out.shape[0]):
            out[i] = _gelu_one(out[i])
    else:
        for i in range(x.shape[0]):
            out[i] = _gelu_one(x[i])


def _gelu_tanh_one(v):  # pragma: no cover - compiled
    """torch's tanh GELU of one float32 ``v``: 0.5 v (1 + tanh(u)) = v / (1 + e^(-2u)), u = sqrt(2 / pi)
    (v + 0.044715 v^3), which does not cancel for negative v."""
    f = np.float32
    w = f(-2 * math.sqrt(2 / math.pi)) * (v + f(0.044715) * v * v * v)
    e = _exp(min(max(w, f(_EXP_MIN)), f(88)))
    return f(-0.0) if w > f(88) else v / (f(1) + (f(0) if w < f(_EXP_MIN) else e))


def _gelu_tanh(x, out):  # pragma: no cover - compiled
    """torch's tanh GELU over the 1-D float32 ``x`` (may be ``out``; one array in place, see _gelu). A NaN
    stays NaN."""
    if x.ctypes.data == out.ctypes.data:
        for i in range(out.shape[0]):
            out[i] = _gelu_tanh_one(out[i])
    else:
        for i in range(x.shape[0]):
            out[i] = _gelu_tanh_one(x[i])


def _shifted_exp(d):  # pragma: no cover - compiled
    """e^d for a softmax's shifted score ``d`` <= 0 (0 below float32's normal range)."""
    f = np.float32
    e = _exp(max(d, f(_EXP_MIN)))
    return f(0) if d < f(_EXP_MIN) else e


def _softmax(x, out, safe):  # pragma: no cover - compiled
    """Softmax of each row of the 2-D float32 ``x`` into ``out`` (may be ``x``), shifted by the row's maximum.
    A row holding a NaN, or only -inf, gives NaNs (as torch and the NumPy path do): the NaN reaches the sum;
    with ``safe``, a row of only -inf gives zeros instead (torch's ``_safe_softmax``, which scaled dot-product
    attention decomposes into: a fully masked query attends to nothing). Compiled with reassociation allowed,
    so the maximum and the sum run in SIMD lanes."""
    f = np.float32
    rows, n = x.shape
    inplace = x.ctypes.data == out.ctypes.data
    for i in range(rows):
        xr, o = x[i], out[i]
        m = xr[0]
        for j in range(1, n):
            v = xr[j]
            m = v if v > m else m
        if safe and m == -np.inf:
            masked = True
            for j in range(n):
                masked = masked and xr[j] == -np.inf
            if masked:
                for j in range(n):
                    o[j] = f(0)
                continue
        if inplace:  # one array in the loop (see _gelu)
            for j in range(n):
                o[j] = _shifted_exp(o[j] - m)
        else:
            for j in range(n):
                o[j] = _shifted_exp(xr[j] - m)
        s = f(0)
        for j in range(n):
            s += o[j]
        r = f(1) / s
        for j in range(n):
            o[j] *= r


def _layer_norm(x, weight, bias, eps, out, mean, rstd):  # pragma: no cover - compiled
    """Each row of the 2-D float32 ``x`` normalised ((x - mean) / sqrt(var + eps), the biased variance, two
    passes as on the NumPy path), times ``weight`` plus ``bias`` (each skipped when empty), into ``out``; the
    rows' mean and 1 / sqrt(var + eps) into ``mean`` and ``rstd``."""
    f = np.float32
    rows, n = x.shape
    with_weight, with_bias = weight.shape[0] > 0, bias.shape[0] > 0
    inplace = x.ctypes.data == out.ctypes.data
    for i in range(rows):
        xr, o = x[i], out[i]
        s = f(0)
        for j in range(n):
            s += xr[j]
        m = s / f(n)
        q = f(0)
        for j in range(n):
            d = xr[j] - m
            q += d * d
        r = f(1) / np.sqrt(q / f(n) + eps)
        if inplace:  # one activation array in the loop (see _gelu)
            for j in range(n):
                v = (o[j] - m) * r
                if with_weight:
                    v *= weight[j]
                if with_bias:
                    v += bias[j]
                o[j] = v
        else:
            for j in range(n):
                v = (xr[j] - m) * r
                if with_weight:
                    v *= weight[j]
                if with_bias:
                    v += bias[j]
                o[j] = v
        mean[i] = m
        rstd[i] = r


def _swiglu(gate, up, out):  # pragma: no cover - compiled
    """out = silu(gate) * up = (gate * sigmoid(gate)) * up over 1-D float32 arrays of one size; ``out`` is
    neither input. sigmoid(v) = 1 / (1 + e^-v), e^-v by ``_exp`` (0 past its range below, and a sigmoid of 0
    above it)."""
    f = np.float32
    for i in range(out.shape[0]):
        v = gate[i]
        w = -v
        e = _exp(min(max(w, f(_EXP_MIN)), f(88)))
        s = f(0) if w > f(88) else f(1) / (f(1) + (f(0) if w < f(_EXP_MIN) else e))
        out[i] = (v * s) * up[i]


def _rms_norm(x, weight, eps, out):  # pragma: no cover - compiled
    """Each row of the 2-D float32 ``x`` times 1 / sqrt(mean of its squares + ``eps``), then times ``weight``
    (one value a column), into ``out`` (which may be ``x``: each column is read before it is written)."""
    f = np.float32
    rows, n = x.shape
    for i in range(rows):
        xr, o = x[i], out[i]
        s = f(0)
        for j in range(n):
            s += xr[j] * xr[j]
        r = f(1) / np.sqrt(s / f(n) + eps)
        for j in range(n):
            o[j] = weight[j] * (xr[j] * r)


def _decode_attention(q, keys, values, n, scale, out, scores):  # pragma: no cover - compiled
    """One query position's attention over the first ``n`` rows of a KV cache: ``q`` [heads, head_dim],
    ``keys``/``values`` [length, kv_heads, head_dim] (query head h reads kv head h // (heads / kv_heads)),
    ``out`` [heads, head_dim], ``scores`` a float32 scratch of at least (heads / kv_heads) * n. Softmax
    shifted by the maximum; the dot products and sums may run in SIMD lanes (reassociation), so results equal
    the NumPy path's within float32 rounding. A decode step's whole attention in one pass instead of a dozen
    NumPy calls; the query heads that share a key/value head go together, so each cache row is read once for
    the group, and the exponentials are a loop without branches (one vector of lanes at a time)."""
    f = np.float32
    heads, dim = q.shape
    group = heads // keys.shape[1]
    weights = scores[: group * n].reshape((group, n))
    for kh in range(keys.shape[1]):
        first = kh * group
        for j in range(n):
            kj = keys[j, kh]
            for g in range(group):
                qh = q[first + g]
                s = f(0)
                for d in range(dim):
                    s += qh[d] * kj[d]
                weights[g, j] = s * scale
        for g in range(group):
            row = weights[g]
            m = f(-np.inf)
            for j in range(n):
                m = row[j] if row[j] > m else m
            total = f(0)
            for j in range(n):
                v = row[j] - m
                e = _exp(max(v, f(_EXP_MIN)))
                e = e if v >= f(_EXP_MIN) else f(0)
                row[j] = e
                total += e
            r = f(1) / total
            for j in range(n):
                row[j] *= r
            out[first + g, :] = f(0)
        for j in range(n):
            vj = values[j, kh]
            for g in range(group):
                w = weights[g, j]
                o = out[first + g]
                for d in range(dim):
                    o[d] += w * vj[d]


def _depthwise3x3(xp, w, stride, out, tmp, lo, hi):  # pragma: no cover - compiled
    """Channel planes ``lo`` to ``hi`` (of the N*C) of a 3x3 depthwise convolution, dilation 1, channel
    multiplier 1, the same ``stride`` (1 or 2) on both axes: out[n, c, i, j] = sum over taps (ki, kj) of
    xp[n, c, i*stride + ki, j*stride + kj] * w[c, ki, kj], with ``xp`` the padded float32 input and ``tmp``
    a float32 scratch of at least H*(W+1) of ``xp``'s planes.

    Every output element is one expression of nine loads, each from a contiguous run so that the loop over a
    row's outputs runs in SIMD lanes (taps summed in the same order everywhere, no fused multiply-add):
    - stride 1, wide rows: the nine runs are the three input rows at column offsets 0, 1, 2;
    - stride 1, narrow rows (32 columns or fewer): the whole plane as one flat run of the padded width, so the
      loop is long; the two columns past each row's end are computed and dropped;
    - stride 2: each input row is first split into its even and odd columns (in ``tmp``), after which the
      taps are runs at offsets 0 (even), 0 (odd) and 1 (even).
    Several times faster than the NumPy path's columns and batched matmuls on MobileNetV2's layers."""
    c = w.shape[0]
    oh, ow = out.shape[2], out.shape[3]
    hp, wp = xp.shape[2], xp.shape[3]
    for plane in range(lo, hi):
        n = plane // c
        ch = plane % c
        k = w[ch]
        taps = (k[0, 0], k[0, 1], k[0, 2], k[1, 0], k[1, 1], k[1, 2], k[2, 0], k[2, 1], k[2, 2])
        src = xp[n, ch]
        o = out[n, ch]
        if stride == 1 and ow > 32:
            for i in range(oh):
                r0, r1, r2 = src[i], src[i + 1], src[i + 2]
                a0, a1, a2 = r0[0:ow], r0[1 : 1 + ow], r0[2 : 2 + ow]
                b0, b1, b2 = r1[0:ow], r1[1 : 1 + ow], r1[2 : 2 + ow]
                c0, c1, c2 = r2[0:ow], r2[1 : 1 + ow], r2[2 : 2 + ow]
                oi = o[i]
                for j in range(ow):
                    oi[j] = _nine_taps(a0[j], a1[j], a2[j], b0[j], b1[j], b2[j], c0[j], c1[j], c2[j], taps)
        elif stride == 1:
            flat = src.reshape(hp * wp)
            size = (oh - 1) * wp + ow
            a0, a1, a2 = flat[0:size], flat[1 : 1 + size], flat[2 : 2 + size]
            b0, b1, b2 = flat[wp : wp + size], flat[wp + 1 : wp + 1 + size], flat[wp + 2 : wp + 2 + size]
            c0, c1, c2 = flat[2 * wp : 2 * wp + size], flat[2 * wp + 1 : 2 * wp + 1 + size], flat[2 * wp + 2 :]
            acc = tmp[0:size]
            for p in range(size):
                acc[p] = _nine_taps(a0[p], a1[p], a2[p], b0[p], b1[p], b2[p], c0[p], c1[p], c2[p], taps)
            for i in range(oh):
                oi = o[i]
                row = acc[i * wp : i * wp + ow]
                for j in range(ow):
                    oi[j] = row[j]
        else:
            half = (wp + 1) // 2
            split = tmp[0 : hp * 2 * half].reshape(hp, 2 * half)
            pairs = wp // 2
            for r in range(hp):
                srow, drow = src[r], split[r]
                evens, odds = drow[0:pairs], drow[half : half + pairs]
                for j in range(pairs):  # both columns of a pair in one loop: the compiler's interleaved loads
                    evens[j] = srow[2 * j]
                    odds[j] = srow[2 * j + 1]
                if wp % 2:
                    drow[pairs] = srow[wp - 1]
            for i in range(oh):
                r0, r1, r2 = split[2 * i], split[2 * i + 1], split[2 * i + 2]
                a0, a1, a2 = r0[0:ow], r0[half : half + ow], r0[1 : 1 + ow]
                b0, b1, b2 = r1[0:ow], r1[half : half + ow], r1[1 : 1 + ow]
                c0, c1, c2 = r2[0:ow], r2[half : half + ow], r2[1 : 1 + ow]
                oi = o[i]
                for j in range(ow):
                    oi[j] = _nine_taps(a0[j], a1[j], a2[j], b0[j], b1[j], b2[j], c0[j], c1[j], c2[j], taps)


def _nine_taps(a0, a1, a2, b0, b1, b2, c0, c1, c2, t):  # pragma: no cover - compiled
    """One 3x3 window's sum, the taps in row order: a0 * t[0] + a1 * t[1] + ... + c2 * t[8], each product and
    sum rounded to float32 (no fused multiply-add)."""
    v = a0 * t[0]
    v += a1 * t[1]
    v += a2 * t[2]
    v += b0 * t[3]
    v += b1 * t[4]
    v += b2 * t[5]
    v += c0 * t[6]
    v += c1 * t[7]
    v += c2 * t[8]
    return v


def _bias_clamp(y, bias, lo, hi):  # pragma: no cover - compiled
    """In place on the [M, C] ``y``: y[m, c] = clamp(y[m, c] + bias[c], lo, hi); an empty bias adds nothing.
    The same float32 add then compare as NumPy's add and clip, so the result is the same bit for bit."""
    m, c = y.shape
    with_bias = bias.shape[0] > 0
    for i in range(m):
        row = y[i]
        for ch in range(c):
            v = row[ch] + bias[ch] if with_bias else row[ch]
            if v < lo:
                v = lo
            elif v > hi:
                v = hi
            row[ch] = v


def _scale_shift_clamp(x, scale, shift, lo, hi, out):  # pragma: no cover - compiled
    """out[n, c, k] = clamp(x[n, c, k] * scale[c] + shift[c], lo, hi) over [N, C, K] float32 arrays (``out`` may
    be ``x``): inference batch norm and the clamp after it in one pass. The same float32 multiply, add and
    comparisons as NumPy's multiply, add and clip (no fused multiply-add), so the results are the same bit for
    bit; a NaN stays NaN. In place, the loop names one array: two that may overlap keep the compiler from
    vectorising it."""
    nb, c, k = x.shape
    inplace = x.ctypes.data == out.ctypes.data
    for n in range(nb):
        for ch in range(c):
            s, t = scale[ch], shift[ch]
            o = out[n, ch]
            if inplace:
                for i in range(k):
                    o[i] = _scaled_clamped(o[i], s, t, lo, hi)
            else:
                xr = x[n, ch]
                for i in range(k):
                    o[i] = _scaled_clamped(xr[i], s, t, lo, hi)


def _scaled_clamped(v, s, t, lo, hi):  # pragma: no cover - compiled
    """clamp(v * s + t, lo, hi) for float32 scalars: two roundings (no fused multiply-add), NaN stays NaN."""
    v = v * s
    v = v + t
    if v < lo:
        return lo
    if v > hi:
        return hi
    return v


def _masked_rows(x, s, out):  # pragma: no cover - compiled
    """out = s, with every row whose ``x`` is all -inf set to zeros (the tail of torch's safe softmax, when the
    softmax ran elsewhere); [rows, n] float32, ``out`` may be ``s`` or ``x``."""
    rows, n = x.shape
    copy = s.ctypes.data != out.ctypes.data
    for i in range(rows):
        xr, o = x[i], out[i]
        masked = True
        for j in range(n):
            if xr[j] != -np.inf:
                masked = False
                break
        if masked:
            for j in range(n):
                o[j] = np.float32(0)
        elif copy:
            sr = s[i]
            for j in range(n):
                o[j] = sr[j]


def _bias_gelu(x, bias, out, tanh):  # pragma: no cover - compiled
    """out[i, j] = gelu(x[i, j] + bias[j]) over [M, N] float32 (exact, or torch's tanh form with ``tanh``): a
    linear layer's bias and the GELU after it in one pass; ``out`` may be ``x`` (one array in place, see
    _gelu)."""
    rows, n = x.shape
    inplace = x.ctypes.data == out.ctypes.data
    for i in range(rows):
        o = out[i]
        if inplace and tanh:
            for j in range(n):
                o[j] = _gelu_tanh_one(o[j] + bias[j])
        elif inplace:
            for j in range(n):
                o[j] = _gelu_one(o[j] + bias[j])
        elif tanh:
            xr = x[i]
            for j in range(n):
                o[j] = _gelu_tanh_one(xr[j] + bias[j])
        else:
            xr = x[i]
            for j in range(n):
                o[j] = _gelu_one(xr[j] + bias[j])


def _bias_add(x, bias, r, out):  # pragma: no cover - compiled
    """out[i, j] = r[i, j] + (x[i, j] + bias[j]) over [M, N] float32: a linear layer's bias and the residual
    add after it in one pass (the same two float32 adds; addition commutes exactly). ``out`` may be ``x`` or
    ``r``."""
    rows, n = x.shape
    on_x, on_r = x.ctypes.data == out.ctypes.data, r.ctypes.data == out.ctypes.data
    for i in range(rows):
        o = out[i]
        if on_x:
            rr = r[i]
            for j in range(n):
                o[j] = rr[j] + (o[j] + bias[j])
        elif on_r:
            xr = x[i]
            for j in range(n):
                o[j] = o[j] + (xr[j] + bias[j])
        else:
            xr, rr = x[i], r[i]
            for j in range(n):
                o[j] = rr[j] + (xr[j] + bias[j])


# The row kernels over numba's threads: each part a run of rows (elements for the GELUs), each row computed as on
# one thread (same bits). One function a kernel, since numba binds the serial kernel a function calls (the
# ``_row_*`` globals, set by HELPERS) when it compiles it.
def _share(n, parts, t):  # pragma: no cover - compiled (inlined)
    """Rows ``lo`` .. ``hi`` of ``n``: part ``t`` of ``parts`` runs of ceil(n / parts)."""
    run = -(-n // parts)
    return min(n, t * run), min(n, (t + 1) * run)


def _gelu_split(x, out, parts):  # pragma: no cover - compiled
    for t in prange(parts):
        lo, hi = _share(x.shape[0], parts, t)
        _row_gelu(x[lo:hi], out[lo:hi])


def _gelu_tanh_split(x, out, parts):  # pragma: no cover - compiled
    for t in prange(parts):
        lo, hi = _share(x.shape[0], parts, t)
        _row_gelu_tanh(x[lo:hi], out[lo:hi])


def _softmax_split(x, out, safe, parts):  # pragma: no cover - compiled
    for t in prange(parts):
        lo, hi = _share(x.shape[0], parts, t)
        _row_softmax(x[lo:hi], out[lo:hi], safe)


def _layer_norm_split(x, weight, bias, eps, out, mean, rstd, parts):  # pragma: no cover - compiled
    for t in prange(parts):
        lo, hi = _share(x.shape[0], parts, t)
        _row_layer_norm(x[lo:hi], weight, bias, eps, out[lo:hi], mean[lo:hi], rstd[lo:hi])


def _bias_gelu_split(x, bias, out, tanh, parts):  # pragma: no cover - compiled
    for t in prange(parts):
        lo, hi = _share(x.shape[0], parts, t)
        _row_bias_gelu(x[lo:hi], bias, out[lo:hi], tanh)


def _bias_add_split(x, bias, r, out, parts):  # pragma: no cover - compiled
    for t in prange(parts):
        lo, hi = _share(x.shape[0], parts, t)
        _row_bias_add(x[lo:hi], bias, r[lo:hi], out[lo:hi])


_row_gelu: Any = None
_row_gelu_tanh: Any = None
_row_softmax: Any = None
_row_layer_norm: Any = None
_row_bias_gelu: Any = None
_row_bias_add: Any = None
prange: Any = range
_SPLIT_FORMS = {
    "gelu": _gelu_split, "gelu_tanh": _gelu_tanh_split, "softmax": _softmax_split, "layer_norm": _layer_norm_split,
    "bias_gelu": _bias_gelu_split, "bias_add": _bias_add_split,
}  # fmt: skip


def rows_step(name: str, *args: Any, split: bool = True) -> Any:
    """The call of kernel ``name`` (``gelu``, ``gelu_tanh``, ``softmax``, ``layer_norm``, ``bias_gelu``,
    ``bias_add``) on ``args`` as the kernel takes them (the tier must be on: ``policy.TierOffError``). With ``split``, from the
    policy's ``split_elements`` elements in its first argument the rows are cut over :func:`get_num_threads`
    threads at each call (:func:`split`); the caller then runs numba's threads, and must keep BLAS's pool quiet
    meanwhile (blas_threads.held, as the packed GEMM's callers do; :func:`splits` tells such a step)."""
    HELPERS.require(f"rows_step({name!r})")
    serial = kernel(name)
    if not split:
        return partial(serial, *args)
    parallel = compiled(f"{name}_split", _SPLIT_FORMS[name], parallel=True, **_KERNELS[name][1])
    worth = args[0].size >= policy.current().split_elements
    return split_step(partial(serial, *args), parallel, args, args[0].shape[0], worth)


# error_model="numpy": a float division by zero gives inf or NaN instead of raising, so that a loop that
# divides can be vectorised.
_KERNELS: dict[str, tuple[Any, dict[str, Any]]] = {
    "gelu": (_gelu, {"error_model": "numpy", "fastmath": {"contract"}}),
    "gelu_tanh": (_gelu_tanh, {"error_model": "numpy", "fastmath": {"contract"}}),
    "softmax": (_softmax, {"error_model": "numpy", "fastmath": {"reassoc", "contract"}}),
    "layer_norm": (_layer_norm, {"error_model": "numpy", "fastmath": {"reassoc"}}),
    "rms_norm": (_rms_norm, {"error_model": "numpy", "fastmath": {"reassoc"}}),
    "swiglu": (_swiglu, {"error_model": "numpy", "fastmath": {"contract"}}),
    "decode_attention": (_decode_attention, {"error_model": "numpy", "fastmath": {"reassoc"}}),
    "depthwise3x3": (_depthwise3x3, {}),
    "scale_shift_clamp": (_scale_shift_clamp, {}),
    "bias_clamp": (_bias_clamp, {}),
    "masked_rows": (_masked_rows, {}),
    "bias_gelu": (_bias_gelu, {"error_model": "numpy", "fastmath": {"contract"}}),
    "bias_add": (_bias_add, {}),
}


def _row_kernel(name: str) -> Any:
    fn, options = _KERNELS[name]
    return lambda: compiled(name, fn, **options)


# ``_exp`` first: the other helpers inline it.
HELPERS = Helpers(
    globals(),
    inline=("_exp", "_gelu_one", "_gelu_tanh_one", "_shifted_exp", "_scaled_clamped", "_nine_taps", "_share"),
    inline_options={"error_model": "numpy"},
    build={f"_row_{name}": _row_kernel(name) for name in _SPLIT_FORMS},
)
