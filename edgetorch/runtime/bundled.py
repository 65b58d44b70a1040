"""Running a BundledProgram's test cases in the runtime and checking the outputs. Torch-free.

As ExecuTorch's ``bundled_program`` runtime: :func:`get_program_data` gives the
``.pte`` inside a ``.bpte`` (or the bytes unchanged for a plain ``.pte``),
:func:`load_bundled_input` stages test case ``i`` of a method,
:func:`verify_method_outputs` compares the method's outputs with the expected
ones within ``rtol``/``atol``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgetorch.errors import EdgetorchError, InvalidInputError
from edgetorch.format import bundled_program as fbp
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY


class BundledVerificationError(EdgetorchError, AssertionError):
    """A method's output differs from the BundledProgram's expected output beyond the tolerances."""


def load_bundled_program(data: bytes | memoryview) -> fbp.BundledProgram:
    return fbp.deserialize_bundled_program(data)


def get_program_data(data: bytes | memoryview) -> bytes | memoryview:
    """The program bytes: those bundled in a ``.bpte``, or ``data`` itself when it is a plain ``.pte``."""
    return load_bundled_program(data).program if fbp.is_bundled_program(data) else data


def num_test_cases(bundle: fbp.BundledProgram, method_name: str) -> int:
    """How many test cases the bundle holds for ``method_name`` (0 when it has no suite for it)."""
    return sum(len(s.test_cases) for s in bundle.method_test_suites if s.method_name == method_name)


def _case(bundle: fbp.BundledProgram, method_name: str, testset_idx: int) -> fbp.BundledMethodTestCase:
    for suite in bundle.method_test_suites:
        if suite.method_name == method_name:
            if not 0 <= testset_idx < len(suite.test_cases):
                raise InvalidInputError(
                    f"method {method_name!r} has {len(suite.test_cases)} bundled test cases; {testset_idx} is out of range"
                )
            return suite.test_cases[testset_idx]
    names = [s.method_name for s in bundle.method_test_suites]
    raise InvalidInputError(f"the bundled program has no test suite for method {method_name!r}; it has {names}")


def _value(v: fbp.Value) -> Any:
    x = v.val
    if isinstance(x, fbp.Tensor):
        dtype = SCALAR_TO_NUMPY[x.scalar_type]
        return np.frombuffer(bytes(x.data), dtype).reshape(x.sizes)
    return next(iter(vars(x).values()))


def bundled_inputs(bundle: fbp.BundledProgram, method_name: str, testset_idx: int) -> list[Any]:
    return [_value(v) for v in _case(bundle, method_name, testset_idx).inputs]


def bundled_expected_outputs(bundle: fbp.BundledProgram, method_name: str, testset_idx: int) -> list[Any]:
    return [_value(v) for v in _case(bundle, method_name, testset_idx).expected_outputs]


def verify_outputs(
    outputs: list[Any], expected: list[Any], method_name: str, testset_idx: int, rtol: float = 1e-5, atol: float = 1e-8
) -> None:
    """Raise :class:`BundledVerificationError` unless every output is close to the expected one."""
    if len(outputs) < len(expected):
        raise BundledVerificationError(
            f"method {method_name!r} returned {len(outputs)} outputs; test case {testset_idx} expects {len(expected)}"
        )
    for i, (got, want) in enumerate(zip(outputs, expected)):
        got = np.asarray(got)
        if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            worst = float(np.max(np.abs(got.astype(np.float64) - want))) if got.shape == want.shape else None
            raise BundledVerificationError(
                f"method {method_name!r}, test case {testset_idx}: output {i} differs from the bundled expected "
                f"output (shape {list(got.shape)} vs {list(want.shape)}, largest difference {worst}, "
                f"rtol={rtol}, atol={atol})"
            )
