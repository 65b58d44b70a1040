"""The XNNPACK backend: ``XnnpackPartitioner`` and ``XnnpackBackend`` lower to blobs ExecuTorch's XNNPACK runs.

The compiler half (``partition``, ``preprocess``, ``serialize``) imports torch
and loads on first use of its names, so that the torch-free runtime half
(``runtime``, ``schema``, ``blob``) can be imported on a device without torch.
"""

from edgetorch._lazy import lazy_exports

_EXPORTS = {
    "XnnpackPartitioner": "partition",
    "XnnpackDynamicallyQuantizedPartitioner": "partition",
    "get_xnnpack_edge_compile_config": "partition",
    "get_xnnpack_executorch_backend_config": "utils.configs",
    "XnnpackBackend": "preprocess",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
