"""Test helpers: lower a small model with edgetorch, then edit its decoded Program to make broken files."""

from __future__ import annotations

from collections.abc import Callable

import torch

from edgetorch.format import program as fbp
from edgetorch.format.pte import load_pte, save_pte


def edgetorch_pte(model: torch.nn.Module, args: tuple) -> bytes:
    """``model`` exported and lowered by edgetorch (portable kernels only)."""
    from edgetorch.exir import to_edge

    with torch.no_grad():
        return to_edge(torch.export.export(model.eval(), args)).to_executorch().buffer


def patched(data: bytes, edit: Callable[[fbp.Program], object]) -> bytes:
    """``data`` with ``edit`` applied to its decoded Program, re-encoded with the same segments."""
    pte = load_pte(data)
    segments = [bytes(pte.segment(i)) for i in range(len(pte.program.segments))]
    edit(pte.program)
    return save_pte(pte.program, segments)


def add_value(plan: fbp.ExecutionPlan, val: object) -> int:
    """Append an EValue to ``plan`` and return its index."""
    plan.values.append(fbp.EValue(val))
    return len(plan.values) - 1
