"""Test cases and suites of a BundledProgram (ExecuTorch's ``bundled_program.config``)."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

__all__ = [
    "ConfigValue",
    "DataContainer",
    "MethodInputType",
    "MethodOutputType",
    "MethodTestCase",
    "MethodTestSuite",
]

ConfigValue = torch.Tensor | int | bool | float
"""What a bundled input or output may be (the kinds of value the BundledProgram schema stores)."""

MethodInputType = Sequence[ConfigValue]
"""The inputs of one run of a method."""

MethodOutputType = Sequence[torch.Tensor]
"""The outputs of one run of a method."""

DataContainer = list | tuple | dict
"""The containers a test case's inputs and outputs may be nested in (namedtuples are tuples)."""


class MethodTestCase:
    """One run of a method: its inputs and (optionally) the outputs it must produce.

    Inputs and outputs may be nested lists, tuples, dicts or namedtuples; they are flattened. Every
    leaf must be a tensor, an int, a bool or a float.
    """

    def __init__(self, inputs: MethodInputType | DataContainer, expected_outputs: Any = None):
        self.inputs = _flat(inputs)
        self.expected_outputs = [] if expected_outputs is None else _flat(expected_outputs)


def _flat(values: Any) -> list[ConfigValue]:
    leaves = pytree.tree_leaves(values)
    for leaf in leaves:
        assert isinstance(leaf, typing.get_args(ConfigValue)), (
            f"The type of input {leaf} with type {type(leaf)} is not supported.\n"
        )
    return leaves


@dataclass
class MethodTestSuite:
    """All test cases of one method."""

    method_name: str
    test_cases: Sequence[MethodTestCase]
