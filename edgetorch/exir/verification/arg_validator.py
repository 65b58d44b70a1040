"""``EdgeOpArgValidator``: run an Edge graph on real inputs and record the calls whose dtypes the op does not allow.

Unlike the Edge verifier, which refuses the first bad node, this collects every violating op with the
dtypes it was called with (``violating_ops[op] = (types, node)``), so a tool can report them all. The
allowed combinations are the ops' dtype constraints (:mod:`edgetorch.exir.dialects.dtype_constraints`).
May import torch.
"""

from __future__ import annotations

from typing import Any

import torch

from edgetorch.errors import EdgetorchError
from edgetorch.exir.dialects._ops import EdgeOpOverload
from edgetorch.exir.dialects.dtype_constraints import call_tensor_dtypes
from edgetorch.exir.error import ExportError, InternalError

__all__ = ["EdgeOpArgValidator", "RunHigherOrderOperatorError"]


class RunHigherOrderOperatorError(EdgetorchError, RuntimeError):
    """The graph calls a delegate or another higher-order operator, which the validator cannot run."""


class EdgeOpArgValidator(torch.fx.Interpreter):
    """``EdgeOpArgValidator(graph_module).run(*inputs)`` fills ``violating_ops``: op -> (dtypes by name, node)."""

    def __init__(self, graph_module: torch.fx.GraphModule) -> None:
        super().__init__(graph_module)
        self.violating_ops: dict[EdgeOpOverload, tuple[dict[str, torch.dtype | None], torch.fx.Node]] = {}
        self.node: torch.fx.Node | None = None

    def run_node(self, n: torch.fx.Node) -> Any:
        self.node = n
        try:
            return super().run_node(n)
        except (InternalError, ExportError, RunHigherOrderOperatorError):
            raise
        except Exception as e:
            raise InternalError(f"running {n.format_node()} failed: {e}") from e

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if isinstance(target, torch._ops.HigherOrderOperator):
            raise RunHigherOrderOperatorError(
                f"expected Edge ops only, found the higher-order operator {target.name()}; "
                "validate the graph before delegating or lowering control flow"
            )
        result = super().call_function(target, args, kwargs)
        if isinstance(target, EdgeOpOverload):
            constraint = target._schema.dtype_constraint
            types = call_tensor_dtypes(target._op, args, kwargs, result)
            if not constraint.validate(types):
                assert self.node is not None
                self.violating_ops[target] = (types, self.node)
        return result
