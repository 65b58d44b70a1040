"""The XNNPACK backend: ``XnnpackPartitioner`` and ``XnnpackBackend`` lower to blobs ExecuTorch's XNNPACK runs.

The compiler half (``partition``, ``preprocess``, ``serialize``) imports torch
and loads on first use of its names, so that the torch-free runtime half
(``runtime``, ``schema``, ``blob``) can be imported on a device without torch.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "XnnpackPartitioner": "partition",
    "get_xnnpack_edge_compile_config": "partition",
    "XnnpackBackend": "preprocess",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
