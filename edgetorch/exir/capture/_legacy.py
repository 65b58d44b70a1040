"""The pre-``torch.export`` capture API some ExecuTorch tests still call: ``exir.capture(f, args, CaptureConfig())``.

``capture`` exports ``f`` with ``torch.export`` and wraps the result in an
:class:`ExirExportedProgram`, whose ``to_edge`` / ``to_executorch`` go through today's
``to_edge`` and ``EdgeProgramManager.to_executorch``. May import torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram

from edgetorch.errors import InvalidArgumentError
from edgetorch.exir.capture._capture import export

__all__ = ["CaptureConfig", "ExirDynamoConfig", "ExirExportedProgram", "capture"]


@dataclass
class ExirDynamoConfig:
    """Dynamo switches of the legacy capture; kept for signature compatibility (``torch.export`` sets its own)."""

    allow_rnn: bool = True
    verbose: bool = True
    assume_static_by_default: bool = False


@dataclass
class CaptureConfig:
    """How ``capture`` traces: only ``pt2_mode`` with ``torch.export`` is supported (see ``capture``)."""

    pt2_mode: bool = True
    enable_functionalization: bool = True
    enable_dynamic_shape: bool = False
    enable_aot: bool = False
    _dynamo_config: ExirDynamoConfig = field(default_factory=ExirDynamoConfig)
    _unlift: bool = False
    _use_old_decomp_table: bool = False


class ExirExportedProgram:
    """An exported program with the legacy ``to_edge`` / ``to_executorch`` chain.

    ``exported_program`` is the ``torch.export.ExportedProgram`` (ATen dialect until ``to_edge``).
    """

    def __init__(
        self, exported_program: ExportedProgram, after_to_edge_passes: bool = False, manager: Any = None
    ) -> None:
        self.exported_program = exported_program
        self.after_to_edge_passes = after_to_edge_passes
        self._manager = manager  # the EdgeProgramManager that made an Edge-dialect program

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.exported_program.graph_module

    def __call__(self, *args: Any) -> Any:
        return self.exported_program.module()(*args)

    def to_edge(self, config: Any = None) -> ExirExportedProgram:
        """The same program lowered to the Edge dialect (``config`` is an ``EdgeCompileConfig``)."""
        from edgetorch.exir.program import to_edge

        if self.after_to_edge_passes:
            raise InvalidArgumentError(
                "ExirExportedProgram.to_edge: expected an ATen-dialect program, found one already in the Edge "
                "dialect; call to_edge once"
            )
        manager = to_edge(self.exported_program, compile_config=config)
        return ExirExportedProgram(manager.exported_program(), after_to_edge_passes=True, manager=manager)

    def to_executorch(self, config: Any = None) -> Any:
        """The ExecuTorch program manager (``.buffer`` is the .pte bytes); ``to_edge`` first when still ATen."""
        from edgetorch.exir.program import EdgeProgramManager

        edge = self if self.after_to_edge_passes else self.to_edge()
        manager = edge._manager or EdgeProgramManager({"forward": edge.exported_program})
        return manager.to_executorch(config)


def capture(
    f: Callable[..., Any], args: tuple, config: CaptureConfig | None = None, dynamic_shapes: Any = None
) -> ExirExportedProgram:
    """Export ``f`` (a function or Module) on example ``args`` with ``torch.export``.

    Deprecated upstream in favour of ``torch.export.export`` then ``exir.to_edge``. Raises
    InvalidArgumentError when ``args`` is not a tuple or ``config`` asks for the pre-PT2 tracer.
    """
    warnings.warn("exir.capture is deprecated: use torch.export.export then exir.to_edge", DeprecationWarning, 2)
    if not isinstance(args, tuple):
        raise InvalidArgumentError(f"capture: expected args to be a tuple, found {type(args).__name__}; wrap them")
    config = config or CaptureConfig()
    if not config.pt2_mode:
        raise InvalidArgumentError(
            "capture: expected CaptureConfig(pt2_mode=True), found pt2_mode=False; "
            "the pre-PT2 tracer is not supported, use torch.export"
        )
    if config._unlift and not config.enable_aot:
        raise InvalidArgumentError("capture: _unlift needs enable_aot=True; leave _unlift unset")
    return ExirExportedProgram(export(f, args, dynamic_shapes=dynamic_shapes))
