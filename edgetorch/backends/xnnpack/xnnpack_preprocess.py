"""``XnnpackBackend`` at ExecuTorch's path (``executorch.backends.xnnpack.xnnpack_preprocess``); it lives in
``backends.xnnpack.preprocess``. Imports torch."""

from edgetorch.backends.xnnpack.preprocess import XnnpackBackend

__all__ = ["XnnpackBackend"]
