"""The configs ExecuTorch's XNNPACK guides import from ``executorch.backends.xnnpack.utils.configs``: the Edge
compile config (it lives with the partitioner), the transform passes to run before partitioning, and the
``ExecutorchBackendConfig`` for XNNPACK programs. Imports torch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from edgetorch.backends.xnnpack._passes import RemoveNoopExpandCopyPass
from edgetorch.backends.xnnpack.partition import get_xnnpack_edge_compile_config
from edgetorch.exir.to_executorch import ExecutorchBackendConfig

__all__ = ["get_transform_passes", "get_xnnpack_edge_compile_config", "get_xnnpack_executorch_backend_config"]


def get_transform_passes(additional_passes: Iterable[Any] | None = None) -> list[Any]:
    """The passes to run on an Edge program before XNNPACK partitioning, then ``additional_passes``."""
    return [RemoveNoopExpandCopyPass(), *(additional_passes or [])]


def get_xnnpack_executorch_backend_config(additional_passes: Iterable[Any] | None = None) -> ExecutorchBackendConfig:
    """An ``ExecutorchBackendConfig`` running ``additional_passes``, with delegate blobs as separate segments."""
    return ExecutorchBackendConfig(passes=list(additional_passes or []), extract_delegate_segments=True)
