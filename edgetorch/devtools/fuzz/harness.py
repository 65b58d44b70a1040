"""The differential check: one module through every (compiler, runtime) pair, each compared with PyTorch eager.

A :class:`Subject` is a module, the inputs of two consecutive calls (the second with other values and, when a
dim is dynamic, another size; buffers the module mutates carry their state from the first call to the second)
and its dynamic shapes. A :class:`Contender` is a :class:`Lowering` (``ExportedProgram`` -> ``.pte`` bytes)
paired with a :class:`Runner` (``.pte`` bytes and calls -> outputs). edgetorch's own are here
(:data:`EDGETORCH`, :data:`EDGETORCH_XNNPACK`, :data:`EDGETORCH_RUNTIME`); the bench adds ExecuTorch's, marked
``reference``, whose runtime runs in a process of its own.

An :class:`Outcome` per contender: ``ok``; ``mismatch`` (outputs beyond the tolerance of their dtype);
``refused`` (a typed edgetorch error, or any error of the reference); ``error`` (an untyped exception in
edgetorch: a bug by definition); ``crash`` (the process running the program died); ``unstable`` (eager itself
moves beyond tolerance when the inputs move by a few ulps: a near-tie no implementation can be held to);
``shared`` (a refusal the reference makes too, or the same wrong outputs). A finding is an outcome of a contender that involves edgetorch
and is none of ok, unstable, shared. A module torch.export or eager refuses is ``skipped``: it tests nothing.
Imports torch (it exports).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from edgetorch.devtools.ops_coverage import compare_outputs, error_text, from_numpy, to_numpy
from edgetorch.errors import EdgetorchError

OK, MISMATCH, REFUSED, ERROR, CRASH, UNSTABLE, SHARED = (
    "ok",
    "mismatch",
    "refused",
    "error",
    "crash",
    "unstable",
    "shared",
)
FINDINGS = (MISMATCH, REFUSED, ERROR, CRASH)

# (rtol, atol) per floating dtype: looser than one operator's (ops_coverage.TOLERANCES), since a chain of
# operators adds up each one's rounding; integers and bools compare exactly.
TOLERANCES = {torch.float32: (1e-3, 1e-4), torch.float16: (2e-2, 2e-3), torch.bfloat16: (1e-1, 2e-2)}
NUDGE = 1e-6  # relative size of the input change that tells an ill-conditioned module (see ``unstable``)


class ProcessCrashed(EdgetorchError, RuntimeError):
    """The process running a program died (signal, abort, hang): a :class:`Runner` raises it to report a crash."""


@dataclass(frozen=True)
class Lowering:
    """A compiler: an exported program to .pte bytes. ``reference``: ExecuTorch's, the one refusals are judged by."""

    name: str
    backend: str  # "portable" or "xnnpack": which reference lowering a refusal is compared with
    lower: Callable[[torch.export.ExportedProgram], bytes]
    reference: bool = False


@dataclass(frozen=True)
class Runner:
    """A runtime: .pte bytes and the calls' inputs to each call's outputs, the method loaded once for all calls."""

    name: str
    run: Callable[[bytes, list[tuple[torch.Tensor, ...]]], list[list[torch.Tensor]]]
    reference: bool = False


@dataclass(frozen=True)
class Contender:
    lowering: Lowering
    runner: Runner

    @property
    def name(self) -> str:
        return f"{self.lowering.name} on {self.runner.name}"

    @property
    def reference(self) -> bool:
        """ExecuTorch's compiler on ExecuTorch's runtime: what it does is no finding of edgetorch's."""
        return self.lowering.reference and self.runner.reference


def _edgetorch_portable(ep: torch.export.ExportedProgram) -> bytes:
    from edgetorch.exir import to_edge

    return to_edge(ep).to_executorch().buffer


def _edgetorch_xnnpack(ep: torch.export.ExportedProgram) -> bytes:
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def _edgetorch_run(pte: bytes, calls: list[tuple[torch.Tensor, ...]]) -> list[list[torch.Tensor]]:
    from edgetorch.runtime import Runtime

    method = Runtime.get().load_program(pte).load_method("forward")
    return [[from_numpy(o) for o in method.execute([to_numpy(x) for x in call])] for call in calls]


EDGETORCH = Lowering("edgetorch", "portable", _edgetorch_portable)
EDGETORCH_XNNPACK = Lowering("edgetorch+xnnpack", "xnnpack", _edgetorch_xnnpack)
EDGETORCH_RUNTIME = Runner("edgetorch runtime", _edgetorch_run)
DEFAULT_CONTENDERS = (Contender(EDGETORCH, EDGETORCH_RUNTIME), Contender(EDGETORCH_XNNPACK, EDGETORCH_RUNTIME))


@dataclass
class Subject:
    """A module and two calls' inputs; ``module`` stays untouched (every use works on a copy)."""

    module: torch.nn.Module
    calls: list[tuple[torch.Tensor, ...]]
    dynamic_shapes: Any = None


@dataclass
class Outcome:
    contender: str
    status: str
    stage: str = ""  # lower, run, compare
    detail: str = ""
    call: int = 0  # for a mismatch: the first call whose outputs differ
    reference: bool = False

    @property
    def finding(self) -> bool:
        return self.status in FINDINGS and not self.reference

    def signature(self) -> tuple[str, str, str]:
        """What must stay the same while a finding is shrunk: who, what, and the error's type."""
        return self.contender, self.status, self.detail.split(":", 1)[0] if self.status != MISMATCH else ""

    def __str__(self) -> str:
        where = f" at {self.stage}" if self.stage and self.status != OK else ""
        return f"{self.contender}: {self.status}{where}" + (f": {self.detail}" if self.detail else "")


@dataclass
class Report:
    """One subject's outcomes; ``skipped`` says why nothing was compared (eager or torch.export refused)."""

    outcomes: list[Outcome] = field(default_factory=list)
    skipped: str = ""

    @property
    def findings(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.finding]


def eager(subject: Subject, calls: list[tuple[torch.Tensor, ...]] | None = None) -> list[list[torch.Tensor]]:
    """Each call's outputs from a fresh copy of the module, the calls in order (buffers carry over)."""
    module = copy.deepcopy(subject.module).eval()
    outputs = []
    with torch.no_grad():
        for call in subject.calls if calls is None else calls:
            out = module(*[x.clone() for x in call])
            outputs.append([t.detach().clone() for t in torch.utils._pytree.tree_leaves(out)])
    return outputs


def export(subject: Subject) -> torch.export.ExportedProgram:
    return torch.export.export(
        copy.deepcopy(subject.module).eval(), subject.calls[0], dynamic_shapes=subject.dynamic_shapes
    )


def _nudged(calls: list[tuple[torch.Tensor, ...]]) -> list[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)

    def nudge(x: torch.Tensor) -> torch.Tensor:
        if not x.is_floating_point():
            return x
        return x + NUDGE * x.abs() * torch.randn(x.shape, generator=g, dtype=x.dtype)

    return [tuple(nudge(x) for x in call) for call in calls]


def _compare_calls(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> tuple[int, str]:
    """The first call whose outputs differ and how, or (0, "")."""
    for i, (g, w) in enumerate(zip(got, want)):
        text = compare_outputs(g, w, TOLERANCES)
        if text:
            return i, f"call {i + 1}, {text}"
    return 0, ""


def _lower(lowering: Lowering, ep: torch.export.ExportedProgram) -> bytes:
    """``ep`` lowered from a copy of its own (lowerings transform the graph); copying a graph module warns
    about a deprecated pytree name, once per case, which says nothing about the case."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return lowering.lower(copy.deepcopy(ep))


def check(
    subject: Subject, contenders: tuple[Contender, ...] = DEFAULT_CONTENDERS, lazy_reference: bool = False
) -> Report:
    """Every contender's outcome on ``subject``; each lowering runs once for all the runners it is paired with.

    With ``lazy_reference`` the reference pairs (ExecuTorch on ExecuTorch) run only for a backend some other
    contender failed on: they only ever judge a failure (shared or not), so a module every contender gets right
    does not pay for them. Their outcomes are then missing from the report for the other backends."""
    report = Report()
    try:
        want = eager(subject)
        ep = export(subject)
    except Exception as e:
        report.skipped = f"eager or torch.export refused: {error_text(e)}"
        return report
    stability: list[str] = []  # computed on the first mismatch only
    lowerings: dict[str, tuple[bytes | None, BaseException | None]] = {}
    results: dict[str, list[list[torch.Tensor]]] = {}  # contender -> outputs, for a mismatch the reference shares

    def run(contender: Contender) -> None:
        lowering, runner = contender.lowering, contender.runner
        outcome = Outcome(contender.name, OK, reference=contender.reference)
        report.outcomes.append(outcome)
        if lowering.name not in lowerings:
            try:
                lowerings[lowering.name] = (_lower(lowering, ep), None)
            except Exception as e:
                lowerings[lowering.name] = (None, e)
        pte, failure = lowerings[lowering.name]
        outcome.stage = "lower"
        if pte is None:
            outcome.status, outcome.detail = _failure(failure, lowering.reference)
            return
        outcome.stage = "run"
        try:
            got = runner.run(pte, [tuple(x.clone() for x in call) for call in subject.calls])
        except ProcessCrashed as e:
            outcome.status, outcome.detail = CRASH, error_text(e)
            return
        except Exception as e:
            outcome.status, outcome.detail = _failure(e, runner.reference)
            return
        outcome.stage = "compare"
        results[contender.name] = got
        outcome.call, text = _compare_calls(got, want)
        if text:
            if not stability:
                stability.append(_compare_calls(eager(subject, _nudged(subject.calls)), want)[1])
            outcome.status, outcome.detail = (UNSTABLE if stability[0] else MISMATCH), text

    ran = [c for c in contenders if not (lazy_reference and c.reference)]
    for contender in ran:
        run(contender)
    if lazy_reference:
        failed = {c.lowering.backend for c, o in zip(ran, report.outcomes) if o.status != OK}
        judges = [c for c in contenders if c.reference and c.lowering.backend in failed]
        for contender in judges:
            run(contender)
        ran += judges
    _mark_shared(report, tuple(ran), results)
    return report


def _failure(e: BaseException | None, reference: bool) -> tuple[str, str]:
    """A refusal: typed, or raised by the reference (``reference``: the stage that raised is ExecuTorch's);
    else an untyped error in edgetorch, a bug whatever the input."""
    typed = reference or isinstance(e, EdgetorchError)
    return (REFUSED if typed else ERROR), error_text(e) if e is not None else ""


def _mark_shared(
    report: Report, contenders: tuple[Contender, ...], results: dict[str, list[list[torch.Tensor]]]
) -> None:
    """Shared: a refusal when ExecuTorch's own pair for the same backend refuses the module too; a mismatch when
    that pair gives the same wrong outputs (ExecuTorch's answer, reproduced: not a fault of edgetorch's)."""
    refused = {
        c.lowering.backend for c, o in zip(contenders, report.outcomes) if c.reference and o.status in (REFUSED, CRASH)
    }
    wrong = {
        c.lowering.backend: results[c.name]
        for c, o in zip(contenders, report.outcomes)
        if c.reference and o.status in (MISMATCH, UNSTABLE)
    }
    for c, o in zip(contenders, report.outcomes):
        if c.reference:
            continue
        if o.status in (REFUSED, ERROR) and c.lowering.backend in refused:
            o.status = SHARED
        elif o.status == MISMATCH and c.lowering.backend in wrong:
            if not _compare_calls(results[c.name], wrong[c.lowering.backend])[1]:
                o.status, o.detail = SHARED, f"ExecuTorch gives the same outputs; {o.detail}"


def first_divergence(subject: Subject, backend: str = "portable", call: int = 0) -> str:
    """``edgetorch debug``'s report on call ``call``'s inputs (from the initial state, as the runtime's side
    starts there too): the first operator beyond tolerance."""
    from edgetorch.devtools.debug import find_divergence

    ep = export(subject)
    program = None
    if backend == "xnnpack":
        from edgetorch.backends.xnnpack import XnnpackPartitioner
        from edgetorch.exir import to_edge_transform_and_lower

        lowered = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()], generate_etrecord=True)
        program = lowered.to_executorch()
    rtol, atol = TOLERANCES[torch.float32]
    return str(find_divergence(ep, tuple(subject.calls[call]), program, rtol=rtol, atol=atol))
