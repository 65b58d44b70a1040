"""The shrinker: the smallest case (fewest steps, inputs and outputs, smallest shapes) that still fails the same way.

Greedy, one change at a time, kept when the predicate still holds: the dynamic batch made static, outputs
dropped, each step deleted (last first, repeated until none can go), inputs dropped, then each dim of the
shape family cut to 1, 2 or half, and the rank cut. A deleted step's users fall back on an earlier value
(see generator.Step), and a step that no longer fits is left out when the case is rendered, so every
candidate is a module that runs. ``budget`` caps the predicate's calls (each is an export and a run).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from edgetorch.devtools.fuzz.generator import Case, render


def _candidates(case: Case) -> Iterator[Case]:
    if case.dynamic:
        yield case.with_(dynamic=False)
    if len(case.outputs) > 1:
        yield from (case.with_(outputs=(o,)) for o in case.outputs)
    for i in reversed(range(len(case.steps))):
        yield case.with_(steps=case.steps[:i] + case.steps[i + 1 :])
    for i in reversed(range(len(case.inputs))):
        if len(case.inputs) > 1:
            yield case.with_(inputs=case.inputs[:i] + case.inputs[i + 1 :])
    for d, size in enumerate(case.base):
        low = 2 if d == 0 and case.dynamic else 1
        for smaller in sorted({low, 2, size // 2}):
            if low <= smaller < size:
                yield case.with_(base=case.base[:d] + (smaller,) + case.base[d + 1 :])
    if len(case.base) > 1:
        yield case.with_(base=case.base[:-1], inputs=tuple((t, ones[:-1]) for t, ones in case.inputs))


def _tidy(case: Case) -> Case:
    """Only the steps that fit (the others render to nothing), so that later candidates delete real steps."""
    return case.with_(steps=tuple(render(case).used))


def shrink(case: Case, fails: Callable[[Case], bool], budget: int = 80) -> tuple[Case, int]:
    """The smallest case found for which ``fails`` holds (``case`` itself must fail), and the calls it took.

    Passes over the candidates until one pass keeps none; after a kept change the pass goes on from the same
    place (a candidate rejected once is not asked about again), which keeps the calls near linear in the size.
    """
    case, calls, place, kept, tried = _tidy(case), 0, 0, False, set()
    while calls < budget:
        candidates = list(_candidates(case))
        if place >= len(candidates):
            if not kept:
                break
            place, kept = 0, False
            continue
        candidate = _tidy(candidates[place])
        if candidate != case and candidate not in tried:
            tried.add(candidate)
            calls += 1
            if fails(candidate):
                case, kept = candidate, True
                continue  # the candidate now at this place is a new one
        place += 1
    return case, calls
