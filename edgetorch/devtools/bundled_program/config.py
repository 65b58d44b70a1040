"""Test cases and suites of a BundledProgram (ExecuTorch's ``bundled_program.config``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

ConfigValue = torch.Tensor | int | bool | float


class MethodTestCase:
    """One run of a method: its inputs and (optionally) the outputs it must produce.

    Inputs and outputs may be nested lists, tuples, dicts or namedtuples; they are flattened. Every
    leaf must be a tensor, an int, a bool or a float.
    """

    def __init__(self, inputs: Any, expected_outputs: Any = None):
        self.inputs = _flat(inputs)
        self.expected_outputs = [] if expected_outputs is None else _flat(expected_outputs)


def _flat(values: Any) -> list[ConfigValue]:
    leaves = pytree.tree_leaves(values)
    for leaf in leaves:
        assert isinstance(leaf, (torch.Tensor, int, bool, float)), (
            f"The type of input {leaf} with type {type(leaf)} is not supported.\n"
        )
    return leaves


@dataclass
class MethodTestSuite:
    """All test cases of one method."""

    method_name: str
    test_cases: Sequence[MethodTestCase]
