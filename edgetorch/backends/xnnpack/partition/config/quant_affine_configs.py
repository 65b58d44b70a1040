"""Configs that keep torchao's affine quantization ops whole (8da4w, 8da8w), for dynamically quantized GEMMs."""

from __future__ import annotations

from edgetorch.backends.xnnpack.partition.config.xnnpack_config import DYNAMIC_QUANT, XNNPartitionerConfig

__all__ = ["ChooseQParamsAffineConfig", "DeQuantizeAffineConfig", "QDQAffineConfigs", "QuantizeAffineConfig"]


class QDQAffineConfigs(XNNPartitionerConfig):
    precisions = (DYNAMIC_QUANT,)


class QuantizeAffineConfig(QDQAffineConfigs):
    ops = ("torchao.quantize_affine.default",)
    original_aten = ops[0]


class DeQuantizeAffineConfig(QDQAffineConfigs):
    ops = ("torchao.dequantize_affine.default",)
    original_aten = ops[0]


class ChooseQParamsAffineConfig(QDQAffineConfigs):
    ops = ("torchao.choose_qparams_affine.default",)
    original_aten = ops[0]
