"""Selective runtimes: run only programs whose operators are on an allow list, and load only their kernels.

ExecuTorch's selective build links just the kernels its models use (``gen_selected_ops``
with ``ROOT_OPS`` or ``OPS_FROM_MODEL``). Here the same has two halves:

* :class:`SelectiveRuntime` refuses, at ``load_method``, a method that needs an
  operator outside its list, naming the operator;
* :func:`write_selective_module` writes a small Python module that imports only
  the kernel families the listed operators live in (not the whole portable
  library) and hands back a :class:`SelectiveRuntime` for them.

:func:`operators_in` lists the operators a .pte needs, with the dtypes of their
tensor arguments, as ``OPS_FROM_MODEL`` does. Torch-free.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable
from typing import Any

from edgetorch.errors import UnsupportedOperatorError
from edgetorch.format import program as fbp
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY
from edgetorch.runtime.kernels.registry import KERNELS
from edgetorch.runtime.plan_analysis import op_key
from edgetorch.runtime.program import Method, OperatorRegistry, Program, Runtime


def operators_in(program: Program, method: str | None = None) -> dict[str, set[tuple[str, ...]]]:
    """Operator name -> the dtype signatures (dtypes of its tensor arguments, in order) it is called with.

    Covers one method, or every method when ``method`` is None.
    """
    plans = [program._plan(method)] if method else list(program.program.execution_plan)
    found: dict[str, set[tuple[str, ...]]] = {}
    for plan in plans:
        for chain in plan.chains:
            for ins in chain.instructions:
                call = ins.instr_args
                if isinstance(call, fbp.KernelCall) and 0 <= call.op_index < len(plan.operators):
                    name = op_key(plan.operators[call.op_index])
                    found.setdefault(name, set()).add(_dtype_signature(plan, name, list(call.args)))
        for op in plan.operators:  # operators a method lists but never calls still have to resolve at load
            found.setdefault(op_key(op), set())
    return found


def _dtype_signature(plan: fbp.ExecutionPlan, name: str, args: list[int]) -> tuple[str, ...]:
    # A KernelCall lists the schema's arguments and then its returns (the outs again); keep the arguments.
    known = KERNELS.get(name)
    dtypes = []
    for j in args[: known[1]] if known else args:
        val = plan.values[j].val if 0 <= j < len(plan.values) else None
        if isinstance(val, fbp.Tensor):
            dtypes.append(str(SCALAR_TO_NUMPY.get(val.scalar_type, val.scalar_type)))
    return tuple(dtypes)


class SelectiveProgram:
    """A :class:`Program` whose ``load_method`` first checks the method's operators against an allow list."""

    def __init__(self, program: Program, allowed: frozenset[str]):
        self._program = program
        self._allowed = allowed

    def load_method(self, name: str = "forward", seed: int | None = None) -> Method:
        """Load method ``name``, or raise UnsupportedOperatorError naming the first operator not selected."""
        for op in self._program.operators(name):
            if op not in self._allowed:
                raise UnsupportedOperatorError(
                    f"method {name!r} needs operator {op!r}, which this selective runtime does not include "
                    f"({len(self._allowed)} operators selected); add it to the operator list (or regenerate the "
                    "selective module from this program with edgetorch.runtime.selective.write_selective_module)"
                )
        return self._program.load_method(name, seed)

    def __getattr__(self, name: str) -> Any:  # everything else is the wrapped Program's
        return getattr(self._program, name)


class SelectiveRuntime(Runtime):
    """A :class:`Runtime` restricted to ``allowed_operators`` ("namespace::op.overload" names).

    A program needing any other operator is refused at ``load_method``. An allowed
    operator still needs a registered kernel by then (custom operators register
    theirs with :func:`edgetorch.runtime.register_kernel`).
    """

    def __init__(self, allowed_operators: Iterable[str], **kwargs: Any):
        super().__init__(**kwargs)
        self.allowed_operators = frozenset(allowed_operators)
        self.operator_registry = OperatorRegistry(self.allowed_operators)

    def load_program(self, data: Any, *args: Any, **kwargs: Any) -> SelectiveProgram:  # type: ignore[override]  # SelectiveProgram wraps a Program (by __getattr__), it does not subclass it
        """Load a .pte as :meth:`Runtime.load_program` does (same arguments: ``verification``, ``data_files``, ...);
        its methods load only if their operators are selected."""
        return SelectiveProgram(super().load_program(data, *args, **kwargs), self.allowed_operators)


def kernel_modules(operators: Iterable[str]) -> list[str]:
    """The kernel family modules whose import registers ``operators`` (custom ops add none).

    Read from the generated index ``edgetorch.runtime.kernels._index``; a family imports the
    shared helpers it needs by itself.
    """
    from edgetorch.runtime.kernels._index import FAMILIES

    return sorted({f"edgetorch.runtime.kernels.{FAMILIES[op]}" for op in operators if op in FAMILIES})


_TEMPLATE = '''"""Selective edgetorch runtime for {count} operators. Generated by edgetorch.runtime.selective; regenerate it, do not edit.

``from {stem} import runtime`` gives a SelectiveRuntime that imports only the kernel
families below instead of the whole portable library (other families stay unimported,
as the runtime imports a family only when a program needs one of its operators).
"""

import importlib

from edgetorch.runtime.selective import SelectiveRuntime

for _module in {modules!r}:
    importlib.import_module(_module)

OPERATORS = {operators!r}
runtime = SelectiveRuntime(OPERATORS)
'''


def write_selective_module(path: str | os.PathLike, operators: Iterable[str]) -> pathlib.Path:
    """Write a module that registers only the kernels ``operators`` need and exposes ``runtime``.

    ``operators`` can come from :func:`operators_in` on the programs to ship. Operators
    outside the portable library (custom ops) are allowed; register their kernels
    after importing the module.
    """
    ops = sorted(set(operators))
    path = pathlib.Path(path)
    modules = tuple(kernel_modules(ops))
    text = _TEMPLATE.format(count=len(ops), stem=path.stem, modules=modules, operators=tuple(ops))
    path.write_text(text)
    return path


__all__ = ["SelectiveProgram", "SelectiveRuntime", "kernel_modules", "operators_in", "write_selective_module"]
