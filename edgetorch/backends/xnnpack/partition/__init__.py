"""The XNNPACK partitioner, at ExecuTorch's documented path
(``executorch.backends.xnnpack.partition.xnnpack_partitioner``) and re-exported here. Imports torch."""

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import (
    KEPT_WHOLE,
    XnnpackPartitioner,
    get_xnnpack_edge_compile_config,
)

__all__ = ["KEPT_WHOLE", "XnnpackPartitioner", "get_xnnpack_edge_compile_config"]
