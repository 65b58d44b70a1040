"""Differential fuzzing of the whole stack: random modules, exported and run every way, compared with eager.

:func:`fuzz` runs a campaign: each case is a module from the built-in generator (:func:`generate`, reproducible
from ``(seed, index)``) or from a user's factory, checked by :func:`check` against every contender (edgetorch's
portable and XNNPACK lowerings on edgetorch's runtime; the bench adds ExecuTorch's compiler and runtime). A
generated case that fails is shrunk (:func:`shrink`) to a minimal module, printed as Python source; a mismatch
also gets ``edgetorch debug``'s first diverging operator. ``edgetorch fuzz`` is the command-line face of it.
Imports torch.
"""

from __future__ import annotations

import collections
import hashlib
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from edgetorch.devtools.fuzz.generator import OTHER_BATCH, Case, generate, load_source, source
from edgetorch.devtools.fuzz.harness import (
    DEFAULT_CONTENDERS,
    MISMATCH,
    Contender,
    Outcome,
    Report,
    Subject,
    check,
    first_divergence,
)
from edgetorch.devtools.fuzz.shrink import shrink

__all__ = [
    "Campaign",
    "Case",
    "Contender",
    "Finding",
    "Subject",
    "case_subject",
    "check",
    "factory_subjects",
    "fuzz",
    "generate",
    "shrink",
    "source",
    "source_subject",
]


def case_subject(case: Case) -> Subject:
    """A generated case as a subject: its module, its example inputs and a second call with other values (and,
    when the batch is dynamic, another batch size)."""
    return source_subject(source(case))


def source_subject(text: str) -> Subject:
    """The subject of a case's source (as :func:`source` writes it, e.g. a kept finding): ``factory()``'s module
    and example inputs, then ``make_inputs`` with the next seed and, when the batch is dynamic, another size."""
    namespace = load_source(text, f"edgetorch_fuzz_{hashlib.sha256(text.encode()).hexdigest()[:16]}")
    module, example, dynamic = namespace["factory"]()
    seed, batch = namespace["make_inputs"].__defaults__
    second = namespace["make_inputs"](seed + 1, OTHER_BATCH if dynamic is not None else batch)
    return Subject(module, [tuple(example), tuple(second)], dynamic)


def _resample(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A tensor like ``x``: same shape and dtype, values drawn from about the same range."""
    if x.dtype == torch.bool:
        return torch.randint(0, 2, x.shape, generator=g).bool()
    if not x.is_floating_point():
        low, high = (int(x.min()), int(x.max())) if x.numel() else (0, 1)
        return torch.randint(low, high + 1, x.shape, generator=g, dtype=x.dtype)
    scale = float(x.float().std()) if x.numel() > 1 else 1.0
    return (torch.randn(x.shape, generator=g) * (scale if scale > 0 else 1.0)).to(x.dtype)


def factory_subjects(factory: Callable[..., Any], seed: int) -> Callable[[int], Subject]:
    """Subjects from a user's factory: ``FACTORY(index)`` gives a new module per case, ``FACTORY()`` one module
    checked on new inputs per case; either returns ``(module, example_args[, dynamic_shapes])``."""
    takes_index = bool(inspect.signature(factory).parameters)
    fixed = None if takes_index else factory()

    def subject(index: int) -> Subject:
        made = factory(index) if takes_index else fixed
        if not isinstance(made, tuple) or len(made) not in (2, 3):
            raise ValueError(
                "FACTORY must return (module, example_args) or (module, example_args, dynamic_shapes), "
                f"got {type(made).__name__}"
            )
        module, example, dynamic = (*made, None)[:3]
        g = torch.Generator().manual_seed(seed * 1_000_003 + index)
        first = tuple(example) if takes_index or index == 0 else tuple(_resample(x, g) for x in example)
        return Subject(module, [first, tuple(_resample(x, g) for x in example)], dynamic)

    return subject


@dataclass
class Finding:
    """A case that failed: its outcome, and for a generated case the minimal one that fails the same way."""

    index: int
    outcome: Outcome
    case: Case | None = None
    minimal: Case | None = None
    shrink_calls: int = 0
    divergence: str = ""  # edgetorch debug's report on the (minimal) module, for a mismatch

    def describe(self) -> str:
        lines = [f"finding in case {self.index}: {self.outcome}"]
        if self.case is not None and self.minimal is not None:
            lines.append(
                f"shrunk from {len(self.case.steps)} steps to {len(self.minimal.steps)} "
                f"({self.shrink_calls} checks); the minimal module, a FILE.py:factory for edgetorch fuzz/debug:"
            )
            lines += ["", source(self.minimal).rstrip(), ""]
        if self.divergence:
            lines += [f"edgetorch debug on it (call {self.outcome.call + 1}'s inputs):", self.divergence]
        return "\n".join(lines)


@dataclass
class Campaign:
    """A campaign's totals: cases, skipped ones, outcomes per contender, and the findings."""

    seed: int
    cases: int = 0
    skipped: int = 0
    agreed: int = 0
    outcomes: dict[str, collections.Counter] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, report: Report) -> None:
        self.cases += 1
        if report.skipped:
            self.skipped += 1
            return
        self.agreed += not report.findings
        for o in report.outcomes:
            self.outcomes.setdefault(o.contender, collections.Counter())[o.status] += 1

    def summary(self) -> str:
        lines = [
            f"{self.cases} cases (seed {self.seed}) in {self.seconds:.0f} s: {self.agreed} agree with eager, "
            f"{self.skipped} skipped (eager or torch.export refused), {len(self.findings)} with findings"
        ]
        for contender, counts in self.outcomes.items():
            lines.append(f"  {contender}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        return "\n".join(lines)


def _still_fails(signature: tuple[str, str, str], contenders: tuple[Contender, ...]) -> Callable[[Case], bool]:
    """The shrinker's predicate: the case still gives a finding with the same signature."""

    def fails(case: Case) -> bool:
        try:
            report = check(case_subject(case), contenders)
        except Exception:  # a candidate the generator cannot build is not the same failure
            return False
        return any(o.signature() == signature for o in report.findings)

    return fails


def fuzz(
    cases: int,
    seed: int = 0,
    contenders: tuple[Contender, ...] = DEFAULT_CONTENDERS,
    factory: Callable[..., Any] | None = None,
    stop_at_first: bool = True,
    shrink_budget: int = 60,
    seconds: float | None = None,
    on_case: Callable[[int, Report], None] | None = None,
    on_finding: Callable[[Finding], None] | None = None,
    rotate: int | None = None,
) -> Campaign:
    """Check ``cases`` modules (generated from ``seed``, or from ``factory``); shrink each finding.

    Stops at the first finding with ``stop_at_first`` (what ``edgetorch fuzz`` does), or after ``seconds``.
    Only the first finding of each signature (contender, status, error type) is shrunk.
    With ``rotate=k`` each case runs only ``k`` of the contenders that are not references, taking turns over the
    cases, and the references only to judge a failure (``check(..., lazy_reference=True)``): a cheaper campaign
    that still has ExecuTorch decide what a refusal or a wrong output is.
    """
    campaign = Campaign(seed)
    t0 = time.perf_counter()
    subjects = factory_subjects(factory, seed) if factory is not None else lambda i: case_subject(generate(seed, i))
    shrunk: set[tuple[str, str, str]] = set()
    for index in range(cases):
        if seconds is not None and time.perf_counter() - t0 > seconds:
            break
        case = generate(seed, index) if factory is None else None
        chosen = contenders if rotate is None else rotation(contenders, rotate, index)
        report = check(subjects(index), chosen, lazy_reference=rotate is not None)
        campaign.add(report)
        if on_case is not None:
            on_case(index, report)
        if report.findings:
            first = report.findings[0]
            # One shrink per kind of finding: the same failure again is counted, not shrunk again.
            budget = shrink_budget if first.signature() not in shrunk else 0
            shrunk.add(first.signature())
            campaign.findings.append(_minimize(index, case, first, chosen, budget, subjects))
            if on_finding is not None:
                on_finding(campaign.findings[-1])
            if stop_at_first:
                break
    campaign.seconds = time.perf_counter() - t0
    return campaign


def rotation(contenders: tuple[Contender, ...], k: int, index: int) -> tuple[Contender, ...]:
    """Case ``index``'s share of a rotating campaign: ``k`` of the contenders that are not references (the next
    ``k`` in turn, so every one is checked on a ``k``-th of the cases), then every reference."""
    players = [c for c in contenders if not c.reference]
    start = (index * k) % max(len(players), 1)
    turn = [players[(start + j) % len(players)] for j in range(min(k, len(players)))]
    return (*turn, *(c for c in contenders if c.reference))


def _minimize(
    index: int,
    case: Case | None,
    outcome: Outcome,
    contenders: tuple[Contender, ...],
    budget: int,
    subjects: Callable[[int], Subject],
) -> Finding:
    """A finding, its case shrunk (generated cases only: a user's module is opaque) with only the contenders
    that decide it (the failing one and ExecuTorch's, which tells a shared refusal), and for a mismatch the
    first operator that diverges."""
    finding = Finding(index, outcome, case)
    failing = next(c for c in contenders if c.name == outcome.contender)
    deciding = tuple(c for c in contenders if c is failing or c.reference)
    if case is not None and budget > 0:
        finding.minimal, finding.shrink_calls = shrink(case, _still_fails(outcome.signature(), deciding), budget)
    if outcome.status == MISMATCH and not failing.runner.reference and budget > 0:
        subject = case_subject(finding.minimal) if finding.minimal is not None else subjects(index)
        try:
            finding.divergence = first_divergence(subject, failing.lowering.backend, outcome.call)
        except Exception as e:  # the report is a help, not the finding: say why it is missing
            finding.divergence = f"(no per-operator report: {type(e).__name__}: {e})"
    return finding
