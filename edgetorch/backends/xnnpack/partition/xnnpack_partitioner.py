"""``XnnpackPartitioner``: delegates to XNNPACK the Edge nodes ``Support`` (``partition.support``) accepts,
with ExecuTorch's options: which configs, which precisions, one delegate per operator. Connected runs of
accepted nodes become one delegate each (one per operator with ``per_op_mode``); everything else stays with
the portable runtime. Why a node is refused is logged at debug level on the
``edgetorch.backends.xnnpack.partition`` logger (``verbose=True`` turns it on). May import torch.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.export import ExportedProgram

from edgetorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
from edgetorch.backends.xnnpack.partition.config.xnnpack_config import (
    ConfigPrecisionType,
    XNNPartitionerConfig,
)
from edgetorch.backends.xnnpack.partition.support import Support
from edgetorch.backends.xnnpack.preprocess import XnnpackBackend
from edgetorch.exir.backend.partition_utils import group_supported_nodes, tag_constant_data, tag_partitions
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.program import EdgeCompileConfig

__all__ = [
    "XnnpackDynamicallyQuantizedPartitioner",
    "XnnpackFloatingPointPartitioner",
    "XnnpackPartitioner",
    "XnnpackQuantizedPartitioner",
    "get_xnnpack_edge_compile_config",
]

logger = logging.getLogger("edgetorch.backends.xnnpack.partition")
_workflow_logger = logging.getLogger(__name__)


def _called_through_to_backend() -> bool:
    """Whether the partitioner runs under ``to_backend`` but not under ``to_edge_transform_and_lower``: the
    older workflow, which partitions after Edge decomposed the ops XNNPACK would take whole."""
    frame = inspect.currentframe()
    names: set[str] = set()
    while frame is not None:
        names.add(frame.f_code.co_name)
        frame = frame.f_back
    return "to_backend" in names and "to_edge_transform_and_lower" not in names


def get_xnnpack_edge_compile_config(skip_dim_order: bool = False) -> EdgeCompileConfig:
    """The Edge compile config ExecuTorch recommends for XNNPACK lowering (no IR validity check)."""
    return EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=skip_dim_order)


class XnnpackPartitioner(Partitioner):
    """Delegates every connected run of operators XNNPACK supports to ``XnnpackBackend``.

    ``configs``: the config classes (``partition.config``) whose operators may be
    delegated (default ``ALL_PARTITIONER_CONFIGS``); ``config_precisions``: the
    precisions to delegate (default all each config supports); ``per_op_mode``:
    one delegate per operator (with its q/dq nodes and fused activation) instead
    of per connected run; ``verbose``: log why nodes are refused. Other keyword
    arguments go to each config.
    """

    def __init__(
        self,
        configs: Sequence[type[XNNPartitionerConfig]] | None = None,
        config_precisions: ConfigPrecisionType | Sequence[ConfigPrecisionType] | None = None,
        per_op_mode: bool = False,
        verbose: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        if verbose:
            logger.setLevel(logging.DEBUG)
            if not logger.hasHandlers():
                logger.addHandler(logging.StreamHandler())
        precisions = _precision_list(config_precisions)
        self.configs: list[XNNPartitionerConfig] = []
        owners: dict[str, XNNPartitionerConfig] = {}
        for config_class in ALL_PARTITIONER_CONFIGS if configs is None else configs:
            if not (isinstance(config_class, type) and issubclass(config_class, XNNPartitionerConfig)):
                raise TypeError(
                    f"configs must be XNNPartitionerConfig subclasses (e.g. LinearConfig); found {config_class!r}"
                )
            config = config_class(**kwargs)
            config.set_enabled_precision_types(precisions)
            for op in config.ops:
                if op in owners:
                    raise RuntimeError(
                        f"configs {type(owners[op]).__name__} and {config_class.__name__} both claim {op}; pass one"
                    )
                owners[op] = config
            self.configs.append(config)
        self.per_op_mode = per_op_mode
        self.delegation_spec = DelegationSpec(XnnpackBackend.__name__, [])

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        if _called_through_to_backend():
            _workflow_logger.warning(
                "DEPRECATION WARNING: the to_edge() + to_backend() workflow lowers ops Edge has already "
                "decomposed (linear as addmm, ...); use to_edge_transform_and_lower() with this partitioner"
            )
        support = Support(exported_program, self.configs)
        if self.per_op_mode:
            groups = support.per_op_groups(exported_program.graph_module)
        else:
            groups = group_supported_nodes(exported_program.graph_module, support.supported)
        groups = [g for g in groups if not all(support.is_constant(n) for n in g)]
        tags = tag_partitions(groups, prefix="xnnpack_")
        # A weight shared with the program (a tied token table) becomes the delegate's own constant: as an input
        # it would be copied into the delegate at every call (113 MB a token for SmolLM2's output projection).
        tag_constant_data(exported_program, copy_shared=True)
        return PartitionResult(exported_program, dict.fromkeys(tags, self.delegation_spec))

    def ops_to_not_decompose(
        self, ep: ExportedProgram
    ) -> tuple[list[torch._ops.OpOverload], Callable[[torch.fx.Node], bool] | None]:
        kept = [c.get_original_aten() for c in self.configs]
        return [op for op in kept if op is not None], Support(ep, self.configs).supported


class XnnpackDynamicallyQuantizedPartitioner(XnnpackPartitioner):
    """Delegates only dynamically quantized GEMMs (and the configs that support DYNAMIC_QUANT)."""

    def __init__(self, **kwargs: Any) -> None:
        if "config_precisions" in kwargs:
            raise ValueError(
                "XnnpackDynamicallyQuantizedPartitioner always uses DYNAMIC_QUANT; "
                "use XnnpackPartitioner to choose config_precisions"
            )
        super().__init__(config_precisions=ConfigPrecisionType.DYNAMIC_QUANT, **kwargs)


class XnnpackFloatingPointPartitioner(XnnpackPartitioner):
    """Delegates with only the FP32 precision enabled."""

    def __init__(self) -> None:
        super().__init__(config_precisions=ConfigPrecisionType.FP32)


class XnnpackQuantizedPartitioner(XnnpackPartitioner):
    """Delegates with only the STATIC_QUANT precision enabled."""

    def __init__(self) -> None:
        super().__init__(config_precisions=ConfigPrecisionType.STATIC_QUANT)


def _precision_list(
    precisions: ConfigPrecisionType | Sequence[ConfigPrecisionType] | None,
) -> list[ConfigPrecisionType] | None:
    if precisions is None or isinstance(precisions, ConfigPrecisionType):
        return None if precisions is None else [precisions]
    found: list[Any] = list(precisions) if isinstance(precisions, list | tuple) else [precisions]
    if not all(isinstance(p, ConfigPrecisionType) for p in found):
        raise TypeError(f"config_precisions takes ConfigPrecisionType values (FP32, ...); found {precisions!r}")
    return found
