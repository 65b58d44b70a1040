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

import functools
import json
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterable
from typing import Any

from edgetorch.errors import UnsupportedOperatorError
from edgetorch.format import program as fbp
from edgetorch.runtime.dtypes import SCALAR_TO_NUMPY
from edgetorch.runtime.executor import op_key
from edgetorch.runtime.kernels.registry import KERNELS
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


# Stands the kernels package up without its __init__ (which imports every kernel family), so that
# importing one family registers just that family's kernels. Shared by the generated module and kernel_modules.
_BARE_KERNEL_PACKAGE = """
import importlib.machinery
import importlib.util
import pathlib
import sys

import edgetorch


def _bare_kernel_package() -> None:
    name = "edgetorch.runtime.kernels"
    if name in sys.modules:
        raise ImportError("edgetorch.runtime was imported before the selective kernel list; import this module first")
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(pathlib.Path(edgetorch.__file__).parent / "runtime" / "kernels")]
    sys.modules[name] = importlib.util.module_from_spec(spec)


_bare_kernel_package()
"""

_IMPORT_ONE = """
import importlib, json
from edgetorch.runtime.kernels.registry import KERNELS
importlib.import_module(sys.argv[1])
loaded = [m for m in sys.modules if m.startswith("edgetorch.runtime.kernels.") and not m.endswith(".registry")]
print(json.dumps({"operators": sorted(KERNELS), "modules": sorted(loaded)}))
"""

_SOURCE_ROOT = pathlib.Path(__file__).resolve().parents[2]
_KERNELS_DIR = pathlib.Path(__file__).resolve().parent / "kernels"


@functools.cache
def _families_alone() -> dict[str, dict[str, list[str]]]:
    """Per kernel family: the operators and kernel modules a fresh interpreter has after importing just it."""
    script = _BARE_KERNEL_PACKAGE + _IMPORT_ONE
    families = sorted(p.stem for p in _KERNELS_DIR.glob("*.py") if p.stem not in ("__init__", "registry"))
    procs = {
        f"edgetorch.runtime.kernels.{f}": subprocess.Popen(
            [sys.executable, "-c", script, f"edgetorch.runtime.kernels.{f}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=_SOURCE_ROOT,
        )
        for f in families
    }
    found = {}
    for module, proc in procs.items():
        out, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"importing {module} alone failed in a fresh interpreter:\n{err}")
        found[module] = json.loads(out)
    return found


def kernel_modules(operators: Iterable[str]) -> list[str]:
    """The fewest portable kernel modules whose import registers ``operators`` (custom ops add none).

    Each family is imported alone in a fresh interpreter, since a family may pull
    in others or register kernels defined elsewhere (``operator.add`` for prim ops);
    each operator goes to the family that brings in the fewest others.
    """
    alone = _families_alone()
    chosen: set[str] = set()
    for op in operators:
        candidates = [m for m, found in alone.items() if op in found["operators"]]
        if candidates:
            chosen.add(min(candidates, key=lambda m: (len(alone[m]["modules"]), m)))
    return sorted(chosen)


_TEMPLATE = '''"""Selective edgetorch runtime for {count} operators. Generated by edgetorch.runtime.selective; regenerate it, do not edit.

``from {stem} import runtime`` gives a SelectiveRuntime that imports only the kernel
families below instead of the whole portable library. Import it before anything
else imports edgetorch.runtime.
"""
{bare_package}
for _module in {modules!r}:
    importlib.import_module(_module)

from edgetorch.runtime.selective import SelectiveRuntime  # noqa: E402

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
    text = _TEMPLATE.format(
        count=len(ops), stem=path.stem, bare_package=_BARE_KERNEL_PACKAGE, modules=modules, operators=tuple(ops)
    )
    path.write_text(text)
    return path


__all__ = ["SelectiveProgram", "SelectiveRuntime", "kernel_modules", "operators_in", "write_selective_module"]
