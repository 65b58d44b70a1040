"""Load-time folding: a kernel call whose every tensor input is a constant runs once, at load, and its
result becomes a constant of the method. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from edgetorch.runtime.plan_analysis import PlanFacts


def foldable(facts: PlanFacts, fn: Callable, params: list[int], rets: list[int], name: str, viewed: set[int]) -> bool:
    """True when every tensor the kernel reads (none, for ``arange`` or ``full``; only their shapes, for
    ``full_like``) is a constant: its result is then computed once, at load.

    In-place ops (``aten::copy_``: they update state each call), impure kernels (random) and results a static
    view reads through (``viewed``) never fold.
    """
    if getattr(fn, "impure", False) or not rets or name.split(".")[0].endswith("_"):
        return False
    slots = facts.slots
    shape_only = getattr(fn, "shape_only", False)  # the caller folds only static plans: shapes are fixed
    reads = [] if shape_only else [j for j in facts.items(params) if j not in rets and j in slots]
    if not (all(slots[j].constant for j in reads) and all(j in slots for j in rets)):
        return False
    return not any(j in viewed for j in rets)


def fold(facts: PlanFacts, vals: list[Any], fn: Callable, args: list[Any], params: list[int], rets: list[int]) -> bool:
    """Run the kernel now; on success its results replace their values (in ``facts.bound`` and ``vals``) as
    constants. False when it fails: the call then stays a step, and fails again at run time naming the
    instruction."""
    bound = facts.bound
    # The result gets memory of its own: its planned slot is shared with other tensors over time.
    private = {j: np.empty_like(bound[j]) for j in rets}
    try:
        result = fn(*[private.get(j, a) if j in rets else a for j, a in zip(params, args)])
    except Exception:
        return False
    results = result if len(rets) > 1 else (result,)
    for j, r in zip(rets, results):
        bound[j] = vals[j] = r
        facts.slots[j].constant = True
    return True
