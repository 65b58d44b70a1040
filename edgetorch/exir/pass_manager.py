"""Pass managers at ExecuTorch's ``exir.pass_manager``: ``PassManager`` runs passes on a GraphModule,
``ExportedProgramPassManager`` on an ExportedProgram.

``PassManager`` lives with the pass infrastructure in :mod:`edgetorch.exir.pass_base`. The
ExportedProgram manager runs graph passes (a callable on a GraphModule) and whole-program passes
(``ExportedProgramPassBase``) in one list; after a graph pass that changed the graph it re-points
the program's signature at the new graph's placeholders and outputs. May import torch and
edgetorch.exir.pass_base, edgetorch.exir.error.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch._export.verifier import Verifier
from torch.export import ExportedProgram
from torch.export.graph_signature import ConstantArgument, ExportGraphSignature, InputSpec, OutputSpec

from edgetorch.exir.error import ExportError, ExportErrorType
from edgetorch.exir.pass_base import (
    ExportedProgramPassBase,
    ExportedProgramPassResult,
    PassManager,
    PassType,
    flatten_passes,
)

__all__ = ["ExportedProgramPassManager", "PassManager", "PassType", "updated_graph_signature"]

logger = logging.getLogger(__name__)


class ExportedProgramPassManager:
    """Runs graph passes and ExportedProgram passes in order on a shallow copy of an ExportedProgram.

    A graph pass returns a ``PassResult`` (``None`` counts as "changed in place"). The schedule repeats
    up to ``steps`` times while some pass changes the program. The checks (no ``call_method`` node, a
    lint-clean graph, ``ExportedProgram.validate``) run before and after, and after each pass with
    ``run_checks_after_each_pass``. A failing pass is reported with the passes that ran before it.
    """

    def __init__(
        self,
        passes: Iterable[Any] | None = None,
        constraints: Iterable[Callable[[Any, Any], bool]] | None = None,
        run_checks_after_each_pass: bool = False,
        suppress_check_failures: bool = False,
        steps: int = 1,
    ) -> None:
        self.passes: list[Any] = list(flatten_passes(passes or []))
        self.constraints = list(constraints or [])
        self.run_checks_after_each_pass = run_checks_after_each_pass
        self.suppress_check_failures = suppress_check_failures
        self.steps = steps
        for i, earlier in enumerate(self.passes):
            for later in self.passes[i + 1 :]:
                for constraint in self.constraints:
                    if not constraint(earlier, later):
                        raise ValueError(
                            f"pass order refused by a constraint: {_name(earlier)} runs before {_name(later)}; "
                            "reorder the passes"
                        )

    def add_pass(self, p: Any) -> None:
        self.passes.append(p)

    def check(self, exported_program: ExportedProgram) -> None:
        """Raise when the program's graph is not one ExecuTorch can take (unless checks are suppressed)."""
        try:
            graph_module = exported_program.graph_module
            graph_module.recompile()
            graph_module.graph.lint()
            for node in graph_module.graph.nodes:
                if node.op == "call_method":
                    raise ExportError(
                        ExportErrorType.NOT_SUPPORTED,
                        f"call_method node {node.format_node()} is not allowed outside a backend delegate; "
                        "rewrite it as a call_function on an ATen or Edge op",
                    )
            exported_program.validate()
        except Exception:
            if not self.suppress_check_failures:
                raise
            logger.warning("check of the exported program failed (suppressed)", exc_info=True)

    def __call__(
        self, exported_program: ExportedProgram, override_verifiers: list[type[Verifier]] | None = None
    ) -> ExportedProgramPassResult:
        program = copy.copy(exported_program)
        if override_verifiers:
            program._verifiers = override_verifiers
        self.check(program)
        modified = False
        for _ in range(self.steps):
            step_modified = False
            for i, p in enumerate(self.passes):
                try:
                    program, changed = _run_one(p, program)
                    if self.run_checks_after_each_pass:
                        self.check(program)
                except Exception as e:
                    before = [_name(q) for q in self.passes[:i]]
                    raise RuntimeError(f"pass {_name(p)!r} failed; it ran after the passes {before}") from e
                step_modified |= changed
            modified |= step_modified
            if not step_modified:
                break
        self.check(program)
        return ExportedProgramPassResult(program, modified)


def _run_one(p: Any, program: ExportedProgram) -> tuple[ExportedProgram, bool]:
    if isinstance(p, ExportedProgramPassBase):
        result = p(program)
        if result.modified:
            result.exported_program.graph_module.recompile()
        return result.exported_program, result.modified
    result = p(program.graph_module)
    graph_module, changed = (program.graph_module, True) if result is None else (result.graph_module, result.modified)
    if changed:
        graph_module.recompile()
        program._graph_module = graph_module
        program._graph_signature = updated_graph_signature(program.graph_signature, graph_module)
    return program, changed


def updated_graph_signature(
    signature: ExportGraphSignature, graph_module: torch.fx.GraphModule
) -> ExportGraphSignature:
    """``signature`` re-pointed, by position, at ``graph_module``'s placeholders and outputs.

    A pass may rename nodes but not add or drop inputs or outputs; ValueError when it did.
    """
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    outputs = list(graph_module.graph.output_node().args[0])
    if len(placeholders) != len(signature.input_specs) or len(outputs) != len(signature.output_specs):
        raise ValueError(
            f"a pass changed the graph's inputs or outputs: {len(signature.input_specs)} inputs and "
            f"{len(signature.output_specs)} outputs expected, {len(placeholders)} and {len(outputs)} found; "
            "a pass that adds inputs must be an ExportedProgramPassBase that updates the signature itself"
        )
    inputs = [
        InputSpec(spec.kind, _renamed(spec.arg, node), spec.target, persistent=spec.persistent)
        for spec, node in zip(signature.input_specs, placeholders, strict=True)
    ]
    results = [
        OutputSpec(spec.kind, _renamed(spec.arg, node), spec.target)
        for spec, node in zip(signature.output_specs, outputs, strict=True)
    ]
    return ExportGraphSignature(input_specs=inputs, output_specs=results)


def _renamed(arg: Any, node: Any) -> Any:
    if isinstance(arg, ConstantArgument) or not isinstance(node, torch.fx.Node):
        return arg
    return dataclasses.replace(arg, name=node.name)


def _name(p: Any) -> str:
    return getattr(p, "__name__", type(p).__name__)
