"""Configs of the GEMM-like operators (linear, convolution, addmm, mm): their precision is detected from their
weight and activation, as ExecuTorch's ``GEMMConfig`` does. Imports torch."""

from __future__ import annotations

from typing import ClassVar

from edgetorch.backends.xnnpack.partition.config.xnnpack_config import (
    DYNAMIC_QUANT,
    FP32,
    STATIC_QUANT,
    XNNPartitionerConfig,
)

__all__ = ["AddmmConfig", "ConvolutionConfig", "GEMMConfig", "LinearConfig", "MMConfig"]


class GEMMConfig(XNNPartitionerConfig):
    """An operator with an activation, a weight and an optional bias, which may run quantized."""

    weight_idx: ClassVar[int] = 1
    act_idx: ClassVar[int] = 0
    precisions = (FP32, STATIC_QUANT, DYNAMIC_QUANT)
    fused_acts: ClassVar[tuple[str, ...]] = ("aten.relu.default", "aten.hardtanh.default")


class LinearConfig(GEMMConfig):
    ops = ("aten.linear.default",)
    original_aten = "aten.linear.default"


class ConvolutionConfig(GEMMConfig):
    ops = ("aten.convolution.default",)


class AddmmConfig(GEMMConfig):
    ops = ("aten.addmm.default",)
    weight_idx = 2
    act_idx = 1


class MMConfig(GEMMConfig):
    ops = ("aten.mm.default",)
