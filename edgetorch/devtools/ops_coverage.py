"""Core ATen coverage of the portable kernel library, checked against PyTorch's OpInfo samples.

Three things live here, each used by the tests, the ``edgetorch ops --coverage``
command and ``bench/opinfo_compare.py``:

* :func:`core_aten_ops`: every ``torch.Tag.core`` overload, the out variant the
  compiler lowers it to, and whether the runtime has a kernel for it;
* :func:`check_op`: one OpInfo × dtype, each sample wrapped in a module,
  exported, lowered, run, and compared with eager, with the stage that failed;
* the results file (:func:`write_results` / :func:`load_results`) and the
  per-kernel summary the coverage table prints.

Imports torch (and the compiler); the runtime stays torch-free.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import ml_dtypes
import numpy as np
import torch
from torch.utils import _pytree as pytree

from edgetorch.errors import EdgetorchError

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool)

# (rtol, atol) per floating dtype; integers and bools compare exactly. NumPy kernels may round
# half-precision intermediates differently from ATen (which often accumulates in float32).
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}

# Sample outcomes. The first three are no fault of the runtime's kernels; the rest are. CRASH: the
# runtime's process died (only a runtime run in a subprocess, as the bench runs ExecuTorch's, can report it).
SKIP, EXPORT_ERROR, PASS = "skip", "export_error", "pass"
LOWER_ERROR, LOAD_ERROR, RUNTIME_ERROR, MISMATCH = "lower_error", "load_error", "runtime_error", "mismatch"
CRASH = "crash"
FAILURES = (LOWER_ERROR, LOAD_ERROR, RUNTIME_ERROR, MISMATCH, CRASH)

# Why complex32 samples are skipped (and what ``edgetorch ops --coverage`` says about complex tensors).
COMPLEX_NOTE = (
    "complex64/complex128 tensors and the FFTs run on edgetorch (ScalarType codes 9/10, which ExecuTorch's "
    "Python enum defines but its schema and portable kernels do not support); complex32 has no NumPy type"
)

# Samples skipped (random ops, non-tensor outputs) before check_op gives up on an OpInfo × dtype.
MAX_SKIPPED = 3

# OpInfos that test Core ATen ops under a name other than the op's own.
CI_EXTRA_OPINFOS = (
    "div", "softmax", "log_softmax", "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.embedding",
    "max", "min", "nn.functional.elu", "nn.functional.adaptive_avg_pool2d", "nn.functional.max_pool2d",
    "nn.functional.pad", "nn.functional.interpolate", "scatter_reduce", "nn.functional.linear",
    "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.hardswish", "nn.functional.silu",
    "mean", "std", "cumprod", "tril", "triu", "index_add", "masked_fill", "native_dropout_backward",
)  # fmt: skip


# --------------------------------------------------------------------------- Core ATen table


@dataclass(frozen=True)
class CoreOp:
    """One Core ATen overload and how the portable library covers it."""

    name: str  # "aten::add.Tensor"
    out_variant: str | None  # "aten::add.out", or None when the op has no out form
    kernel: bool  # the runtime registers a kernel under out_variant (or under name, for scalar ops)


def core_aten_ops() -> list[CoreOp]:
    """Every ``torch.Tag.core`` ATen overload, sorted by name, mapped the way ``to_executorch`` maps it."""
    from edgetorch.exir.passes.out_variant import _copy_form, _out_variant
    from edgetorch.runtime.kernels.registry import KERNELS

    rows = []
    # ``torch.ops.aten`` lists only packets already looked up; the dispatcher knows them all.
    names = {n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::")}
    for packet_name in sorted(names):
        packet = getattr(torch.ops.aten, packet_name, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core not in op.tags:
                continue
            out_op, _ = _out_variant(_copy_form(op))
            out = out_op.name() if out_op is not None else None
            rows.append(CoreOp(op.name(), out, (out or op.name()) in KERNELS))
    return sorted(rows, key=lambda r: r.name)


# --------------------------------------------------------------------------- lowering and running


@dataclass(frozen=True)
class Lowering:
    """A compiler + runtime pair to push samples through (edgetorch's own, or ExecuTorch's in the bench)."""

    name: str
    lower: Callable[[torch.export.ExportedProgram], bytes]
    load: Callable[[bytes], Any]  # .pte bytes -> a loaded method
    execute: Callable[[Any, list[torch.Tensor]], list[torch.Tensor]]


def _edgetorch_lower(ep: torch.export.ExportedProgram) -> bytes:
    from edgetorch.exir import to_edge

    return to_edge(ep).to_executorch().buffer


def _edgetorch_load(pte: bytes) -> Any:
    from edgetorch.runtime import Runtime

    return Runtime.get().load_program(pte).load_method("forward")


def _edgetorch_execute(method: Any, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [from_numpy(o) for o in method.execute([to_numpy(x) for x in inputs])]


EDGETORCH = Lowering("edgetorch", _edgetorch_lower, _edgetorch_load, _edgetorch_execute)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor as the NumPy array the runtime takes (bfloat16 as ``ml_dtypes.bfloat16``)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def from_numpy(x: Any) -> torch.Tensor:
    """A runtime output (array or Python scalar) as a tensor."""
    if not isinstance(x, np.ndarray):
        return torch.tensor(x)
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(x.copy(order="C").view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x.copy(order="C"))


def program_operators(pte: bytes) -> list[str]:
    """The operator names (``ns::op.overload``) a .pte's ``forward`` calls, read with the torch-free loader."""
    from edgetorch.runtime import Runtime

    return sorted(set(Runtime.get().load_program(pte).operators("forward")))


# --------------------------------------------------------------------------- OpInfo samples


class RuntimeCrashed(EdgetorchError, RuntimeError):
    """The process running a program died (signal, abort or hang) instead of returning or raising."""


@dataclass
class SampleResult:
    """What happened to one OpInfo sample at one dtype."""

    op: str  # OpInfo name, with its variant: "div.floor_rounding"
    dtype: str  # "float32"
    index: int
    status: str
    detail: str = ""
    kernels: list[str] = field(default_factory=list)


class _SampleModule(torch.nn.Module):
    """Calls ``fn`` on a sample whose tensors are the module's inputs and whose other values are constants."""

    def __init__(self, fn: Callable, leaves: list, spec: pytree.TreeSpec):
        super().__init__()
        self.fn, self.leaves, self.spec = fn, leaves, spec
        self.positions = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]

    def forward(self, *tensors: torch.Tensor) -> Any:
        leaves = list(self.leaves)
        for i, t in zip(self.positions, tensors):
            leaves[i] = t
        args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.fn(*args, **kwargs)


def opinfo_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def opinfos(full: bool = False) -> list[Any]:
    """The OpInfos to check: in CI those testing Core ATen ops directly; with ``full`` all of ``op_db``."""
    from torch.testing._internal.common_methods_invocations import op_db

    if full:
        return list(op_db)
    core = {name.split("::")[1].split(".")[0] for name in (r.name for r in core_aten_ops())}
    return [o for o in op_db if o.name in core or o.aten_name in core or o.name in CI_EXTRA_OPINFOS]


def op_dtypes(op: Any, full: bool = False) -> list[torch.dtype]:
    """The dtypes of :data:`DTYPES` the OpInfo supports on CPU; without ``full`` only the first of them."""
    supported = [d for d in DTYPES if d in op.supported_dtypes("cpu")]
    return supported if full else supported[:1]


def check_op(op: Any, dtype: torch.dtype, samples: int = 1, lowering: Lowering = EDGETORCH) -> list[SampleResult]:
    """Run up to ``samples`` usable samples of OpInfo ``op`` at ``dtype`` through ``lowering``; one result each."""
    results: list[SampleResult] = []
    name, dname = opinfo_name(op), str(dtype).removeprefix("torch.")
    torch.manual_seed(0)
    try:
        for index, sample in enumerate(_samples(op, dtype)):
            result = SampleResult(name, dname, index, PASS)
            _check_sample(op, sample, lowering, result)
            results.append(result)
            if sum(r.status != SKIP for r in results) >= samples or len(results) >= samples + MAX_SKIPPED:
                break
    except Exception as e:  # the OpInfo's own sample generator failed
        results.append(SampleResult(name, dname, len(results), SKIP, f"sample_inputs raised {error_text(e)}"))
    return results


def _samples(op: Any, dtype: torch.dtype) -> Iterable[Any]:
    """The OpInfo's sample inputs, each drawn after reseeding as ``op.sample_inputs`` does outside a unittest
    TestCase (so the same samples); without its tracking wrapper, which looks for the calling test by reading
    the source of every frame on the stack (``inspect.stack``), about 0.2 s a call under pytest."""
    from torch.testing._internal.common_utils import SEED, set_rng_seed

    samples = iter(op.sample_inputs_func(op, "cpu", dtype, False))
    while True:
        set_rng_seed(SEED)
        sample = next(samples, None)
        if sample is None:
            return
        yield sample


def _check_sample(op: Any, sample: Any, lowering: Lowering, result: SampleResult) -> None:
    """Fill ``result``: the first stage that failed, with its error text, or PASS.

    A program calling a random op (``torch.Tag.nondeterministic_seeded``) cannot match eager's generator
    value by value; its outputs are checked by :func:`_compare_random` instead.
    """
    args = (sample.input, *sample.args)
    leaves, spec = pytree.tree_flatten((args, dict(sample.kwargs)))
    leaves = [x.detach().contiguous() if isinstance(x, torch.Tensor) else x for x in leaves]
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    reason = _unsupported(tensors)
    if getattr(op, "has_nondeterministic_output", False):
        reason = "nondeterministic output (uninitialised values)"
    module = _SampleModule(op.op, leaves, spec)
    want = None
    if reason is None:
        want, reason = _eager(module, tensors)
    if reason is not None and reason != _NONDETERMINISTIC:
        result.status, result.detail = SKIP, reason
        return
    stage = EXPORT_ERROR
    try:
        ep = torch.export.export(module, tuple(tensors), strict=False)
        random = _is_random(ep)
        if reason is not None and not random:
            result.status, result.detail = SKIP, reason
            return
        stage = LOWER_ERROR
        pte = lowering.lower(ep)
        result.kernels = program_operators(pte)
        stage = LOAD_ERROR
        method = lowering.load(pte)
        stage = RUNTIME_ERROR
        got = lowering.execute(method, [t.clone() for t in tensors])
    except RuntimeCrashed as e:
        result.status, result.detail = CRASH, f"{stage}: {error_text(e)}"
        return
    except Exception as e:  # every failure is recorded with the stage it happened in
        result.status, result.detail = stage, error_text(e)
        return
    mismatch = _compare_random(got, _more_draws(ep.module(), tensors, want)) if random else compare_outputs(got, want)
    if mismatch:
        result.status, result.detail = MISMATCH, mismatch
    elif random:
        result.detail = "random op: shapes, dtypes and support checked, not values"


def _unsupported(tensors: list[torch.Tensor]) -> str | None:
    for t in tensors:
        if t.dtype == torch.complex32:
            return f"complex input ({t.dtype}): {COMPLEX_NOTE}"
        if t.layout != torch.strided:
            return f"input of layout {t.layout}: ExecuTorch programs carry only dense (strided) tensors"
    return None


def _is_random(ep: torch.export.ExportedProgram) -> bool:
    return any(
        isinstance(n.target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in n.target.tags
        for n in ep.graph.nodes
    )


_NONDETERMINISTIC = "nondeterministic output (random or uninitialised values)"


def _eager(module: torch.nn.Module, tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor] | None, str | None]:
    """The eager outputs as a flat list, and why the sample cannot be checked value by value (or None)."""
    try:
        with torch.no_grad():
            first = module(*[t.clone() for t in tensors])
            second = module(*[t.clone() for t in tensors])
    except Exception as e:
        return None, f"eager raised {error_text(e)}"
    want, again = pytree.tree_leaves(first), pytree.tree_leaves(second)
    if not want or not all(isinstance(x, torch.Tensor) for x in want):
        return None, f"non-tensor output {type(first).__name__}"
    if any(w.dtype == torch.complex32 for w in want):
        return None, f"complex output: {COMPLEX_NOTE}"
    want = [w.detach() for w in want]
    if not all(w.shape == a.shape and torch.equal(w.nan_to_num(), a.nan_to_num()) for w, a in zip(want, again)):
        return want, _NONDETERMINISTIC
    return want, None


# Eager draws pooled (per output) before a random op's support is inferred: one draw of a 1-element output
# says nothing about the distribution (a single normal draw is non-negative half of the time).
MIN_SUPPORT_DRAWS = 256


def _more_draws(module: torch.nn.Module, tensors: list[torch.Tensor], want: list[torch.Tensor]) -> list[list]:
    """Eager's outputs ``want`` and further draws of the exported ``module``, per output, until each has enough
    values (the exported module, since OpInfos wrap random ops in a call that re-seeds torch each time)."""
    draws = [[w] for w in want]
    numel = min((w.numel() for w in want), default=0)
    with torch.no_grad():
        for _ in range(min(64, -(-MIN_SUPPORT_DRAWS // numel) - 1) if numel else 0):
            for pool, w in zip(draws, pytree.tree_leaves(module(*[t.clone() for t in tensors]))):
                pool.append(w.detach())
    return draws


def _compare_random(got: list[torch.Tensor], draws: list[list[torch.Tensor]]) -> str:
    """Empty when random outputs ``got`` look drawn from the distribution eager's ``draws`` came from.

    Checks what holds for every draw: shapes and dtypes, and the support eager's draws show (finite,
    non-negative, within [0, 1], 0/1-valued, integer-valued).
    """
    if len(got) != len(draws):
        return f"{len(got)} outputs, expected {len(draws)}"
    for i, (g, pool) in enumerate(zip(got, draws)):
        w = pool[0]
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i}: {g.dtype}{list(g.shape)}, expected {w.dtype}{list(w.shape)}"
        if w.numel() == 0 or w.dtype == torch.bool:
            continue
        g, w = g.double(), torch.cat([d.double().flatten() for d in pool])
        properties = {
            "finite": torch.isfinite,
            "non-negative": lambda t: t >= 0,
            "within [0, 1]": lambda t: (t >= 0) & (t <= 1),
            "0 or 1": lambda t: (t == 0) | (t == 1),
            "integer-valued": lambda t: t == t.round(),
        }
        for name, holds in properties.items():
            if holds(w).all() and not holds(g).all():
                return f"output {i}: eager's values are all {name}, ours are not"
    return ""


def compare_outputs(
    got: list[torch.Tensor], want: list[torch.Tensor], tolerances: dict[torch.dtype, tuple[float, float]] = TOLERANCES
) -> str:
    """Empty when ``got`` matches ``want`` within ``tolerances`` (rtol, atol per floating dtype; integers and
    bools compare exactly); otherwise what differs."""
    if len(got) != len(want):
        return f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        rtol, atol = (
            tolerances.get(w.dtype, tolerances[torch.float32])
            if w.is_floating_point() or w.is_complex()
            else (0.0, 0.0)
        )
        try:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
        except AssertionError as e:
            return f"output {i}: {error_text(e)}"
    return ""


def error_text(e: BaseException) -> str:
    """An exception as one short line: its type and the first lines of its message."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    text = " ".join(lines[:3]) if lines else ""
    return f"{type(e).__name__}: {text}"[:400]


def op_outcome(results: list[SampleResult]) -> tuple[str, str]:
    """One OpInfo's status and why: its first failing sample's, else PASS if a sample passed, else the first's."""
    for r in results:
        if r.status in FAILURES:
            return r.status, r.detail
    for r in results:
        if r.status == PASS:
            return PASS, r.detail
    return (results[0].status, results[0].detail) if results else (SKIP, "no samples")


# --------------------------------------------------------------------------- results file and summary


def write_results(path: str | pathlib.Path, results: Iterable[SampleResult], meta: dict[str, Any]) -> None:
    """Save sample results (and where they came from) as JSON for ``edgetorch ops --coverage``."""
    data = {"meta": meta, "samples": [asdict(r) for r in results]}
    pathlib.Path(path).write_text(json.dumps(data, indent=1) + "\n")


def load_results(path: str | pathlib.Path) -> list[SampleResult]:
    """The sample results saved by :func:`write_results`."""
    data = json.loads(pathlib.Path(path).read_text())
    return [SampleResult(**s) for s in data["samples"]]


@dataclass
class KernelVerification:
    """What the OpInfo samples say about one kernel."""

    verified: set[str] = field(default_factory=set)  # dtypes of passing samples that used it
    failed: dict[str, set[str]] = field(default_factory=dict)  # dtype -> OpInfo names of failing samples using it


def summarize(results: Iterable[SampleResult]) -> dict[str, KernelVerification]:
    """Per kernel name: the dtypes passing samples verified, and the failing samples that used it."""
    out: dict[str, KernelVerification] = {}
    for r in results:
        for k in r.kernels:
            v = out.setdefault(k, KernelVerification())
            if r.status == PASS:
                v.verified.add(r.dtype)
            elif r.status in FAILURES and (r.status != LOAD_ERROR or repr(k) in r.detail):
                v.failed.setdefault(r.dtype, set()).add(r.op)  # a load error blames only the kernel it names
    return out


def coverage_rows(results: Iterable[SampleResult]) -> list[tuple[str, str, str, str, str]]:
    """One row per Core ATen overload: name, out variant, kernel present, dtypes verified, result."""
    summary = summarize(results)
    rows = []
    for op in core_aten_ops():
        key = op.out_variant or op.name
        v = summary.get(key, KernelVerification())
        if not op.kernel:
            result = "no out variant" if op.out_variant is None else "missing kernel"
        elif v.failed:
            result = "FAIL " + "; ".join(f"{d}: {', '.join(sorted(ops))}" for d, ops in sorted(v.failed.items()))
        elif v.verified:
            result = "verified"
        else:
            result = "unverified"
        rows.append(
            (op.name, op.out_variant or "-", "yes" if op.kernel else "no", ",".join(sorted(v.verified)), result)
        )
    return rows


def check_ops(
    ops: Iterable[Any], full: bool = False, samples: int = 1, lowering: Lowering = EDGETORCH
) -> list[SampleResult]:
    """:func:`check_op` over several OpInfos and their supported dtypes."""
    results = []
    for op in ops:
        for dtype in op_dtypes(op, full):
            results.extend(check_op(op, dtype, samples, lowering))
    return results


__all__ = [
    "CoreOp",
    "EDGETORCH",
    "KernelVerification",
    "RuntimeCrashed",
    "Lowering",
    "SampleResult",
    "check_op",
    "check_ops",
    "core_aten_ops",
    "coverage_rows",
    "load_results",
    "op_dtypes",
    "op_outcome",
    "opinfos",
    "summarize",
    "write_results",
]
