"""Program helpers at ExecuTorch's path ``executorch.backends.xnnpack.utils.utils``: whether a node is a
constant (parameter, buffer, lifted tensor) of the program and its tensor. They live in
``backends.transforms.utils``; this module names them where XNNPACK code imports them. Imports torch.
"""

from __future__ import annotations

from edgetorch.backends.transforms.utils import get_param_tensor, is_param_node

__all__ = ["get_param_tensor", "is_param_node"]
