"""``ConfigPrecisionType``: the precisions an XNNPACK partitioner config can be enabled for (ExecuTorch's
values). Standard library only."""

from __future__ import annotations

from enum import Enum

__all__ = ["ConfigPrecisionType"]


class ConfigPrecisionType(Enum):
    FP32 = 1
    STATIC_QUANT = 2
    DYNAMIC_QUANT = 3
