"""The base of the XNNPACK partitioner's per-operator configs, and the precisions a config can be enabled for.

A config names one operator XNNPACK can take (``target_name``, as ExecuTorch
spells it: the overload without its namespace), the ATen overloads edgetorch
lowers under it (``ops``), and the precisions it supports. ``XnnpackPartitioner``
delegates a node only when the config owning its operator is among its
``configs`` and has a precision left after ``config_precisions``; what the
node's arguments must satisfy is the partitioner's ``CONSTRAINTS`` table.
Imports torch.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch.export import ExportedProgram

from edgetorch.backends.xnnpack.partition.config.precision import ConfigPrecisionType

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ConfigPrecisionType", "XNNPartitionerConfig"]


FP32 = ConfigPrecisionType.FP32
STATIC_QUANT = ConfigPrecisionType.STATIC_QUANT
DYNAMIC_QUANT = ConfigPrecisionType.DYNAMIC_QUANT

logger = logging.getLogger(__name__)

UNSUPPORTED_OPTIONS = ("force_non_static_weights_for_f32_linear", "enable_bf16")
"""Options ExecuTorch's configs take that edgetorch's XNNPACK lowering does not implement (only False is accepted)."""


class XNNPartitionerConfig:
    """One operator the XNNPACK delegate can take, and the precisions it is enabled for."""

    target_name: ClassVar[str]
    ops: ClassVar[tuple[str, ...]] = ()
    """Qualified names (``aten.add.Tensor``) of the overloads this config decides for; the first is ExecuTorch's."""
    precisions: ClassVar[tuple[ConfigPrecisionType, ...]] = (FP32,)
    original_aten: ClassVar[str | None] = None
    """The ATen op kept out of decomposition so that the delegate can take it whole, if any."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.ops:
            cls.target_name = cls.ops[0].split(".", 1)[1]

    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            if name not in UNSUPPORTED_OPTIONS:
                # ExecuTorch's configs read the options they know from **kwargs and ignore the rest (its own
                # tests pass the retired force_fp32_dynamic_linear), so an unknown option is logged, not refused.
                logger.warning(
                    "%s ignores the unknown option %r; the options it reads are %s",
                    type(self).__name__,
                    name,
                    UNSUPPORTED_OPTIONS,
                )
                continue
            if value:
                raise NotImplementedError(
                    f"{name}=True is not implemented by edgetorch's XNNPACK lowering; leave it False"
                )
        self.enabled_precision_types = self.supported_precision_types()

    def supported_precision_types(self) -> list[ConfigPrecisionType]:
        return list(self.precisions)

    def set_enabled_precision_types(self, precision_types: Iterable[ConfigPrecisionType] | None) -> None:
        """Enable the given precisions this config supports (None keeps all); with none left it claims nothing."""
        if precision_types:
            wanted = list(precision_types)
            self.enabled_precision_types = [p for p in self.supported_precision_types() if p in wanted]

    def get_original_aten(self) -> torch._ops.OpOverload | None:
        return _resolve(self.original_aten) if self.original_aten else None

    def check_constraints(self, node: torch.fx.Node, ep: ExportedProgram) -> bool:
        """Whether XNNPACK, with this config alone, takes ``node`` (whose target must be one of ``ops``)."""
        from edgetorch.backends.xnnpack.partition.support import Support

        return Support(ep, [self]).supported(node)

    def get_node_and_deps(self, node: torch.fx.Node, ep: ExportedProgram) -> list[torch.fx.Node]:
        """``node`` and the nodes delegated with it (its q/dq nodes, fused activation, getitems), or [] if
        ``node`` is not taken."""
        from edgetorch.backends.xnnpack.partition.support import Support

        support = Support(ep, [self])
        return support.node_and_deps(node) if support.supported(node) else []

    get_partition = get_node_and_deps


def _resolve(name: str) -> Any:
    """The OpOverload a qualified name such as ``aten.linear.default`` names, or None where it is not registered
    (torchao's ops without torchao)."""
    namespace, packet, overload = name.split(".")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), packet), overload)
    except (AttributeError, RuntimeError):
        return None
