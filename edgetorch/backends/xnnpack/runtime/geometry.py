"""The XNNPACK runtime's sliding windows: a node's kernel, stride, dilation and padding as the op layer's
NHWC :class:`~edgetorch.runtime.ops.window.Window` (output sizes, tap views, im2col views live there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from edgetorch.backends.xnnpack import schema as xs
from edgetorch.backends.xnnpack.runtime.values import Unsupported
from edgetorch.runtime.ops.window import Window

__all__ = ["Window", "conv_window", "nhwc", "pool_window"]


def _explicit_padding(n: Any) -> None:
    if n.flags & xs.FLAG_TENSORFLOW_SAME_PADDING:
        raise Unsupported("TensorFlow SAME padding (flag 0x4) is not supported; explicit paddings are")


def conv_window(n: Any) -> Window:
    _explicit_padding(n)
    return Window(
        n.kernel_height, n.kernel_width, n.subsampling_height, n.subsampling_width,
        max(n.dilation_height, 1), max(n.dilation_width, 1),
        n.padding_top, n.padding_right, n.padding_bottom, n.padding_left,
    )  # fmt: skip


def pool_window(n: Any) -> Window:
    _explicit_padding(n)
    return Window(
        n.pooling_height, n.pooling_width, max(n.stride_height, 1), max(n.stride_width, 1),
        max(n.dilation_height, 1), max(n.dilation_width, 1),
        n.padding_top, n.padding_right, n.padding_bottom, n.padding_left,
    )  # fmt: skip


def nhwc(x: np.ndarray, what: str) -> tuple[int, int, int, int]:
    if x.ndim != 4:
        raise ValueError(f"{what} expects a 4-d NHWC input, found shape {x.shape}")
    return x.shape
