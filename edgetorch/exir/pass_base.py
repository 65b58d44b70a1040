"""Pass infrastructure for edge graphs: ExportPass, PassResult, PassManager, ExportedProgramPassBase.

``ExportPass`` re-runs a graph node by node on fake tensors and builds a new
graph from what each hook returns, so a subclass that overrides
``call_operator`` can rewrite one op into one, many or no ops while every new
node gets a correct ``meta["val"]``. It builds on torch's interpreter-based
export pass base and teaches it Edge-dialect targets (``EdgeOpOverload``).
``ExportedProgramPassBase`` is for passes that need the whole ExportedProgram (its
signature, constants, state dict), not only the graph; ``ExportedProgramPassManager``
(in ``pass_manager``) runs both kinds. May import torch and edgetorch.exir.dialects only.
"""

from __future__ import annotations

import logging
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch._export.pass_base import _ExportPassBaseDeprecatedDoNotUse
from torch._export.pass_infra.node_metadata import NodeMetadata
from torch._export.pass_infra.proxy_value import ProxyValue
from torch._higher_order_ops.executorch_call_delegate import is_lowered_module
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.errors import EdgetorchError
from edgetorch.exir.dialects import EdgeOpOverload

__all__ = [
    "ExportPass",
    "ExportPassBaseError",
    "ExportedProgramPassBase",
    "ExportedProgramPassResult",
    "NodeMetadata",
    "PassBase",
    "PassManager",
    "PassResult",
    "PassType",
    "ProxyValue",
    "map_args",
]

logger = logging.getLogger(__name__)

PassType = Callable[[torch.fx.GraphModule], PassResult | None]


class ExportPass(_ExportPassBaseDeprecatedDoNotUse):
    """Interpreter-based pass: override ``call_operator(op, args, kwargs, meta)`` to rewrite ops.

    ``super().call_operator(new_op, args, kwargs, meta)`` emits a node and returns a
    ``ProxyValue`` holding the (fake) result; chain such calls for one-to-many
    rewrites, or return an input (``args[0]``) to drop an op. Calling the pass on a
    GraphModule returns a ``PassResult`` with a freshly traced graph.
    """

    class ExportInterpreter(_ExportPassBaseDeprecatedDoNotUse.ExportInterpreter):
        """Dispatches Edge-dialect targets to ``call_operator`` like ATen ones."""

        def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ProxyValue:
            if isinstance(target, EdgeOpOverload):
                return self.callback.call_operator(target, args, kwargs, NodeMetadata(self.node.meta))
            if target is torch.ops.higher_order.scan:  # torch's base walks cond and map bodies, not scan's
                combine, init, xs, additional = args
                return self.callback.call_scan(combine, init, xs, additional, NodeMetadata(self.node.meta))
            return super().call_function(target, args, kwargs)

    class ExportTracer(_ExportPassBaseDeprecatedDoNotUse.ExportTracer):
        """Keeps lowered backend modules under ExecuTorch's attribute names (``lowered_module_N``)."""

        def create_arg(self, a: Any) -> torch.fx.Node:
            if is_lowered_module(a) and a not in self.submodules:
                name = f"lowered_module_{sum(is_lowered_module(m) for m in self.submodules)}"
                self.root.add_module(name, a)
                self.submodules[a] = name
            return super().create_arg(a)

    def call_scan(
        self,
        combine: torch.fx.GraphModule,
        init: list[ProxyValue],
        xs: list[ProxyValue],
        additional: Any,
        meta: NodeMetadata,
    ) -> ProxyValue:
        """Run the pass on ``torch.scan``'s combine function too (on a carry, one row of each scanned tensor and
        the additional inputs), then emit the scan with the new function."""
        rows = [x.data[0] for x in xs]
        body = self.call_submodule(combine, (*[c.data for c in init], *rows, *[a.data for a in additional]))
        if body is None:
            raise ExportPassBaseError("the pass returned nothing for scan's combine function")
        return self._fx(
            "call_function", torch.ops.higher_order.scan, (body.graph_module, init, xs, additional), {}, meta
        )

    def call_getitem(self, value: ProxyValue, key: int, meta: NodeMetadata) -> ProxyValue:
        """Emit ``value[key]`` (kept as its own hook so passes can intercept tuple outputs)."""
        return self._fx("call_function", operator.getitem, (value, key), {}, meta)


class ExportPassBaseError(EdgetorchError, RuntimeError):
    """A pass asked the pass infrastructure for something it cannot do (ExecuTorch's type)."""


@dataclass(frozen=True)
class ExportedProgramPassResult:
    """What an ExportedProgram pass returns: the program (new or the same) and whether it changed."""

    exported_program: ExportedProgram
    modified: bool


class ExportedProgramPassBase(ABC):
    """A pass over a whole ExportedProgram: override ``call``; ``requires``/``ensures`` check before/after."""

    def __call__(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        self.requires(exported_program)
        result = self.call(exported_program)
        self.ensures(exported_program)
        return result

    @abstractmethod
    def call(self, exported_program: ExportedProgram) -> ExportedProgramPassResult:
        """Transform ``exported_program``; return the result and whether anything changed."""

    def requires(self, exported_program: ExportedProgram) -> None:  # noqa: B027 (optional hook)
        """Raise if ``exported_program`` lacks what the pass needs (nothing by default)."""

    def ensures(self, exported_program: ExportedProgram) -> None:  # noqa: B027 (optional hook)
        """Raise if the pass left ``exported_program`` in a state it should not (nothing by default)."""


class PassManager:
    """Runs passes in order on a GraphModule; nested lists of passes are flattened.

    A pass is a ``PassBase``/``ExportPass`` instance or any callable taking a
    GraphModule and returning a ``PassResult`` (or ``None`` after editing in place).
    With ``run_checks_after_each_pass=True`` the built-in check (no ``call_method``
    nodes) and every check added with ``add_checks`` run after each pass; their
    errors propagate unless ``suppress_check_failures=True``, which only logs them.
    """

    def __init__(
        self,
        passes: Iterable[Any] | None = None,
        run_checks_after_each_pass: bool = False,
        suppress_check_failures: bool = False,
    ) -> None:
        self.passes: list[PassType] = list(flatten_passes(passes or []))
        self.run_checks_after_each_pass = run_checks_after_each_pass
        self.suppress_check_failures = suppress_check_failures
        self._checks: list[Callable[[torch.fx.GraphModule], None]] = [_no_call_method]

    def add_pass(self, p: PassType) -> None:
        """Append one pass to the end of the schedule."""
        self.passes.append(p)

    def add_checks(self, check: Callable[[torch.fx.GraphModule], None]) -> None:
        """Register a check (raises on a bad graph) to run after every pass."""
        self._checks.append(check)

    def check(self, graph_module: torch.fx.GraphModule) -> None:
        """Run every registered check on ``graph_module``."""
        for check in self._checks:
            try:
                check(graph_module)
            except Exception:
                if not self.suppress_check_failures:
                    raise
                logger.warning("check %s failed (suppressed)", getattr(check, "__name__", check), exc_info=True)

    def __call__(self, graph_module: torch.fx.GraphModule) -> PassResult:
        modified = False
        for p in self.passes:
            result = p(graph_module)
            if result is None:
                modified = True
            else:
                graph_module, modified = result.graph_module, modified or result.modified
            graph_module.recompile()
            if self.run_checks_after_each_pass:
                self.check(graph_module)
        return PassResult(graph_module, modified)


def _no_call_method(graph_module: torch.fx.GraphModule) -> None:
    for node in graph_module.graph.nodes:
        if node.op == "call_method":
            raise ValueError(
                f"call_method node {node.format_node()} is not allowed in an ExecuTorch program; "
                "rewrite it as a call_function on an ATen or Edge op."
            )


def map_args(op: Any, fn: Callable[[Any, torch.Argument], Any], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A call's arguments with ``fn(value, schema_argument)`` applied to each one ``op``'s schema names."""
    new_args, new_kwargs = list(args), dict(kwargs)
    for i, arg in enumerate(op._schema.arguments):
        if i < len(new_args) and not arg.kwarg_only:
            new_args[i] = fn(new_args[i], arg)
        elif arg.name in new_kwargs:
            new_kwargs[arg.name] = fn(new_kwargs[arg.name], arg)
    return tuple(new_args), new_kwargs


def flatten_passes(passes: Iterable[Any]) -> Iterable[Any]:
    """The passes of a possibly nested list, in order."""
    for p in passes:
        if isinstance(p, list | tuple):
            yield from flatten_passes(p)
        else:
            yield p
