"""BundledProgram: an executorch program manager plus test suites, checked against the program's methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from edgetorch.devtools.bundled_program.config import MethodTestSuite
from edgetorch.format import bundled_program as fbp
from edgetorch.format import program as fp
from edgetorch.format.pte import load_pte
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY

_TORCH_OF = {
    fp.ScalarType.BYTE: torch.uint8,
    fp.ScalarType.CHAR: torch.int8,
    fp.ScalarType.SHORT: torch.int16,
    fp.ScalarType.INT: torch.int32,
    fp.ScalarType.LONG: torch.int64,
    fp.ScalarType.HALF: torch.float16,
    fp.ScalarType.FLOAT: torch.float32,
    fp.ScalarType.DOUBLE: torch.float64,
    fp.ScalarType.BOOL: torch.bool,
    fp.ScalarType.BFLOAT16: torch.bfloat16,
}
_SCALAR_OF = {v: k for k, v in _TORCH_OF.items()}
_PRIMS = {fp.Int: int, fp.Bool: bool, fp.Double: float}


class BundledProgram:
    """``BundledProgram(executorch_program, method_test_suites)`` (or ``pte_file_path=``), as ExecuTorch's.

    The constructor checks that every suite names a method of the program and that each test case's
    inputs match that method's inputs in number and dtype (AssertionError with ExecuTorch's messages).
    """

    def __init__(
        self,
        executorch_program: Any = None,
        method_test_suites: Sequence[MethodTestSuite] = (),
        pte_file_path: str | None = None,
    ):
        if executorch_program is None and pte_file_path is None:
            raise RuntimeError("Either executorch_program or pte_file_path must be provided")
        if executorch_program is not None and pte_file_path is not None:
            raise RuntimeError("Only one of executorch_program or pte_file_path can be used")
        if pte_file_path is not None:
            with open(pte_file_path, "rb") as f:
                self._pte = f.read()
        else:
            self._pte = bytes(executorch_program.buffer)
        self.executorch_program = executorch_program
        self.method_test_suites = sorted(method_test_suites, key=lambda s: s.method_name)
        self._program = load_pte(self._pte).program
        self._check()

    def _check(self) -> None:
        plans = {plan.name: plan for plan in self._program.execution_plan}
        names = {s.method_name for s in self.method_test_suites}
        assert names <= set(plans), (
            "All method names in bundled config should be found in program.execution_plan, "
            f"but {names - set(plans)} does not include."
        )
        for suite in self.method_test_suites:
            plan = plans[suite.method_name]
            kinds = [plan.values[i].val for i in plan.inputs]
            outs = [plan.values[i].val for i in plan.outputs]
            for case in suite.test_cases:
                assert len(case.inputs) == len(kinds), (
                    "The number of input in each bundled set and Program shall equal, "
                    f"but get {len(case.inputs)} and {len(kinds)}"
                )
                for value, kind in zip(case.inputs, kinds):
                    if isinstance(kind, fp.Tensor):
                        want = _TORCH_OF.get(kind.scalar_type)
                        assert isinstance(value, torch.Tensor) and value.dtype == want, (
                            f"The input tensor {value} dtype shall be {want}, but now is {getattr(value, 'dtype', type(value))}"
                        )
                    else:
                        want = _PRIMS.get(type(kind))
                        assert type(value) is want, (
                            f"The input primitive dtype shall be {want}, but now is {type(value)}"
                        )
                for i, (value, kind) in enumerate(zip(case.expected_outputs, outs)):
                    assert isinstance(kind, fp.Tensor), "Only supports program with output in Tensor type."
                    assert isinstance(value, torch.Tensor), (
                        f"The {i}-th expected output shall be a tensor, but now is {type(value)}"
                    )
                    want = _TORCH_OF.get(kind.scalar_type)
                    assert value.dtype == want, (
                        f"The label tensor {value} dtype shall be {want}, but now is {value.dtype}"
                    )

    def serialize_to_schema(self) -> fbp.BundledProgram:
        suites = [
            fbp.BundledMethodTestSuite(
                method_name=s.method_name,
                test_cases=[
                    fbp.BundledMethodTestCase(
                        inputs=[_value(v) for v in case.inputs],
                        expected_outputs=[_value(v) for v in case.expected_outputs],
                    )
                    for case in s.test_cases
                ],
            )
            for s in self.method_test_suites
        ]
        return fbp.BundledProgram(version=fbp.SCHEMA_VERSION, method_test_suites=suites, program=self._pte)


def _value(v: Any) -> fbp.Value:
    if isinstance(v, torch.Tensor):
        t = v.detach().contiguous().cpu()
        data = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        tensor = fbp.Tensor(
            scalar_type=_SCALAR_OF[t.dtype], sizes=list(t.shape), data=data, dim_order=list(range(t.dim()))
        )
        return fbp.Value(val=tensor)
    if type(v) is bool:
        return fbp.Value(val=fbp.Bool(bool_val=v))
    if type(v) is int:
        return fbp.Value(val=fbp.Int(int_val=v))
    return fbp.Value(val=fbp.Double(double_val=float(v)))


def tensor_of(t: fbp.Tensor) -> torch.Tensor:
    """A bundled tensor as a torch tensor (a copy)."""
    dtype = SCALAR_TO_NUMPY[t.scalar_type]
    return torch.from_numpy(np.frombuffer(bytes(t.data), dtype).reshape(t.sizes).copy())
