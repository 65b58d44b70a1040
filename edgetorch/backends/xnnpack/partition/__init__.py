"""The XNNPACK partitioner, at ExecuTorch's documented path
(``executorch.backends.xnnpack.partition.xnnpack_partitioner``) and re-exported here. Imports torch."""

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackDynamicallyQuantizedPartitioner,
    XnnpackFloatingPointPartitioner,
    XnnpackPartitioner,
    XnnpackQuantizedPartitioner,
    get_xnnpack_edge_compile_config,
)

__all__ = [
    "XnnpackDynamicallyQuantizedPartitioner",
    "XnnpackFloatingPointPartitioner",
    "XnnpackPartitioner",
    "XnnpackQuantizedPartitioner",
    "get_xnnpack_edge_compile_config",
]
