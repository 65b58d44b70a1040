"""``get_xnnpack_edge_compile_config`` where ExecuTorch's guides import it from
(``executorch.backends.xnnpack.utils.configs``); it lives with the partitioner. Imports torch."""

from edgetorch.backends.xnnpack.partition import get_xnnpack_edge_compile_config

__all__ = ["get_xnnpack_edge_compile_config"]
