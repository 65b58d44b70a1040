"""``EXIREdgeDialectVerifier``: ExecuTorch's callable Edge verifier, built from a compile config.

``EXIREdgeDialectVerifier(config)(exported_program)`` raises :class:`SpecViolationError` unless the
program is valid Edge IR under that config: Edge ops only (Core ATen, the config's exception list and
preserved ops, or ops the runtime runs whole), allowed dtypes, contiguous weights, and dim-order
consistency (``dim_order_ops`` forms when the config uses dim order, their ``memory_format`` ATen ops
when it skips it). With ``_check_ir_validity=False`` it checks nothing. May import torch.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from edgetorch.exir.capture._config import EdgeCompileConfig
from edgetorch.exir.dialects._ops import EdgeOpOverload
from edgetorch.exir.passes.to_edge import dim_order_forms
from edgetorch.exir.verification import (
    EdgeVerifier,
    SpecViolationError,
    _is_core,
    _is_symbolic,
    _runs_whole,
    verify_edge_graph,
)

__all__ = ["EXIREdgeDialectVerifier", "SpecViolationError"]


def _check_dim_order(op: torch._ops.OpOverload, use_dim_order: bool) -> None:
    if use_dim_order and op in dim_order_forms():
        raise SpecViolationError(
            f"{op} should not be used in dim_order mode: expected its dim_order form {dim_order_forms()[op]}; "
            "lower with the same EdgeCompileConfig(_skip_dim_order=...) the verifier uses"
        )
    if not use_dim_order and op.namespace == "dim_order_ops":
        raise SpecViolationError(
            f"{op} should not be used in non-dim_order mode: expected a memory_format op; "
            "lower with the same EdgeCompileConfig(_skip_dim_order=...) the verifier uses"
        )


class _EdgeDialectVerifier(EdgeVerifier):
    dialect = "EDGE"

    def __init__(self, config: EdgeCompileConfig, exceptions: Sequence[Any], preserve: Sequence[Any]) -> None:
        self.enable = config._check_ir_validity
        self.use_dim_order = not config._skip_dim_order
        self._core_aten_ops_exception_list = list(exceptions)
        self._preserve_ops = list(preserve)
        self.check_valid_op = self.check_valid_edge_op  # type: ignore[method-assign]

    def _allowed(self) -> set:
        return {*self._core_aten_ops_exception_list, *self._preserve_ops}

    def check_valid_edge_op(self, op: Any) -> None:
        """Raise SpecViolationError unless ``op`` may be a call target of a valid Edge graph."""
        if not self.enable or op is operator.getitem or _is_symbolic(op) or op in self._allowed():
            return
        if isinstance(op, EdgeOpOverload):
            _check_dim_order(op._op, self.use_dim_order)
            if _is_core(op._op) or op._op in self._allowed() or _runs_whole(op._op):
                return
            raise SpecViolationError(
                f"{op} is not in the Core ATen op set: decompose it, or list it in "
                "EdgeCompileConfig(_core_aten_ops_exception_list=[...]) if the runtime has a kernel for it"
            )
        if isinstance(op, torch._ops.OpOverload):
            raise SpecViolationError(
                f"Operator {op.__module__}.{op.__name__} is not an Edge operator: expected exir_ops.edge.* targets"
            )

    def check_additional(self, gm: torch.fx.GraphModule) -> None:
        if not self.enable:
            return
        for name, tensor in itertools.chain(gm.named_parameters(), gm.named_buffers()):
            if not tensor.is_contiguous():
                raise SpecViolationError(
                    f"expected contiguous weights, found {name} not contiguous; call .contiguous()"
                )
        verify_edge_graph(gm, self._allowed())
        for module in gm.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in module.graph.nodes:
                    if node.op == "call_function" and isinstance(node.target, EdgeOpOverload):
                        _check_dim_order(node.target._op, self.use_dim_order)

    def is_valid(self, gm: torch.fx.GraphModule) -> bool:
        try:
            self(gm)
        except SpecViolationError:
            return False
        return True

    def __call__(self, ep_or_gm: ExportedProgram | torch.fx.GraphModule) -> None:
        if not self.enable:
            return
        gm = ep_or_gm.graph_module if isinstance(ep_or_gm, ExportedProgram) else ep_or_gm
        self.check_additional(gm)


def EXIREdgeDialectVerifier(  # noqa: N802 (ExecuTorch's name)
    edge_compile_config: EdgeCompileConfig | None = None,
    class_only: bool = False,
    core_aten_ops_exception_list: Sequence[Any] | None = None,
    preserve_ops: Sequence[Any] | None = None,
) -> Any:
    """A verifier for Edge programs lowered with ``edge_compile_config`` (its lists extend the given ones).

    ``class_only=True`` returns a verifier class (constructed without arguments) instead of an instance.
    """
    config = edge_compile_config or EdgeCompileConfig()
    exceptions = [*(core_aten_ops_exception_list or ()), *config._core_aten_ops_exception_list]
    preserve = [*(preserve_ops or ()), *config.preserve_ops]

    class EXIREdgeDialectVerifierClass(_EdgeDialectVerifier):
        dialect = "EDGE"

        def __init__(self) -> None:
            super().__init__(config, exceptions, preserve)

    return EXIREdgeDialectVerifierClass if class_only else EXIREdgeDialectVerifierClass()
