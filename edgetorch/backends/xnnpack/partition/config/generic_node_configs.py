"""Configs of the operators XNNPACK takes one node at a time (element-wise, pooling, shape, copies, q/dq).

Each names its operator, the extra overloads edgetorch lowers under it (``add.Scalar`` with ``add.Tensor``,
``_log_softmax`` with ``_softmax``, squeezes with ``view_copy``), and its precisions, as ExecuTorch's configs
of the same names. ``EluConfig`` (listed but switched off in ExecuTorch) and ``ScaledDotProductAttentionConfig``
are lowered by edgetorch's XNNPACK backend and part of its default configs. Imports torch.
"""

from __future__ import annotations

from edgetorch.backends.xnnpack.partition.config.xnnpack_config import FP32, STATIC_QUANT, XNNPartitionerConfig

__all__ = [
    "AbsConfig",
    "AddConfig",
    "AvgPoolingConfig",
    "BMMConfig",
    "CatConfig",
    "CeilConfig",
    "ClampConfig",
    "CloneConfig",
    "CloneDimOrderConfig",
    "ConstantPadConfig",
    "CosConfig",
    "DeQuantizedPerTensorConfig",
    "DivConfig",
    "EluConfig",
    "ExpConfig",
    "FloorConfig",
    "GeluConfig",
    "GenericNodePartitionerConfig",
    "HardswishConfig",
    "HardtanhConfig",
    "LeakyReLUConfig",
    "LogConfig",
    "MaxPool2dConfig",
    "MaximumConfig",
    "MeanDimConfig",
    "MinimumConfig",
    "MulConfig",
    "NegConfig",
    "PermuteConfig",
    "PowConfig",
    "QuantizedPerTensorConfig",
    "ReLUConfig",
    "ReciprocalSquareRootConfig",
    "ScaledDotProductAttentionConfig",
    "SigmoidConfig",
    "SinConfig",
    "SliceCopyConfig",
    "SoftmaxConfig",
    "SquareRootConfig",
    "SubConfig",
    "TanhConfig",
    "ToDimOrderCopyConfig",
    "UnsqueezeCopyConfig",
    "UpsampleBilinear2dConfig",
    "ViewCopyConfig",
]

FP32_AND_STATIC = (FP32, STATIC_QUANT)


class GenericNodePartitionerConfig(XNNPartitionerConfig):
    """A config whose node is delegated alone, or, statically quantized, with its dequantized inputs and its
    quantized output."""


class AbsConfig(GenericNodePartitionerConfig):
    ops = ("aten.abs.default",)


class AddConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.add.Tensor",
        "aten.add.Scalar",
    )
    precisions = FP32_AND_STATIC


class AvgPoolingConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.avg_pool2d.default",
        "aten._adaptive_avg_pool2d.default",
    )


class BMMConfig(GenericNodePartitionerConfig):
    ops = ("aten.bmm.default",)


class CatConfig(GenericNodePartitionerConfig):
    ops = ("aten.cat.default",)
    precisions = FP32_AND_STATIC


class CeilConfig(GenericNodePartitionerConfig):
    ops = ("aten.ceil.default",)


class ClampConfig(GenericNodePartitionerConfig):
    ops = ("aten.clamp.default",)
    precisions = FP32_AND_STATIC


class CloneConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.clone.default",
        "aten.alias_copy.default",
        "aten.expand_copy.default",
    )


class CloneDimOrderConfig(GenericNodePartitionerConfig):
    ops = ("dim_order_ops._clone_dim_order.default",)


class ConstantPadConfig(GenericNodePartitionerConfig):
    ops = ("aten.constant_pad_nd.default",)


class CosConfig(GenericNodePartitionerConfig):
    ops = ("aten.cos.default",)


class DeQuantizedPerTensorConfig(GenericNodePartitionerConfig):
    ops = ("quantized_decomposed.dequantize_per_tensor.default",)
    precisions = (STATIC_QUANT,)


class DivConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.div.Tensor",
        "aten.div.Scalar",
    )


class EluConfig(GenericNodePartitionerConfig):
    ops = ("aten.elu.default",)
    precisions = FP32_AND_STATIC
    original_aten = "aten.elu.default"


class ExpConfig(GenericNodePartitionerConfig):
    ops = ("aten.exp.default",)


class FloorConfig(GenericNodePartitionerConfig):
    ops = ("aten.floor.default",)


class GeluConfig(GenericNodePartitionerConfig):
    ops = ("aten.gelu.default",)


class HardswishConfig(GenericNodePartitionerConfig):
    ops = ("aten.hardswish.default",)
    original_aten = "aten.hardswish.default"


class HardtanhConfig(GenericNodePartitionerConfig):
    ops = ("aten.hardtanh.default",)
    precisions = FP32_AND_STATIC


class LeakyReLUConfig(GenericNodePartitionerConfig):
    ops = ("aten.leaky_relu.default",)


class LogConfig(GenericNodePartitionerConfig):
    ops = ("aten.log.default",)


class MaximumConfig(GenericNodePartitionerConfig):
    ops = ("aten.maximum.default",)


class MaxPool2dConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.max_pool2d.default",
        "aten.max_pool2d_with_indices.default",
    )
    precisions = FP32_AND_STATIC
    original_aten = "aten.max_pool2d.default"


class MeanDimConfig(GenericNodePartitionerConfig):
    ops = ("aten.mean.dim",)
    precisions = FP32_AND_STATIC


class MinimumConfig(GenericNodePartitionerConfig):
    ops = ("aten.minimum.default",)


class MulConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.mul.Tensor",
        "aten.mul.Scalar",
    )
    precisions = FP32_AND_STATIC


class NegConfig(GenericNodePartitionerConfig):
    ops = ("aten.neg.default",)


class PermuteConfig(GenericNodePartitionerConfig):
    ops = ("aten.permute_copy.default",)
    precisions = FP32_AND_STATIC


class PowConfig(GenericNodePartitionerConfig):
    ops = ("aten.pow.Tensor_Scalar",)


class QuantizedPerTensorConfig(GenericNodePartitionerConfig):
    ops = ("quantized_decomposed.quantize_per_tensor.default",)
    precisions = (STATIC_QUANT,)


class ReciprocalSquareRootConfig(GenericNodePartitionerConfig):
    ops = ("aten.rsqrt.default",)


class ReLUConfig(GenericNodePartitionerConfig):
    ops = ("aten.relu.default",)
    precisions = FP32_AND_STATIC


class SigmoidConfig(GenericNodePartitionerConfig):
    ops = ("aten.sigmoid.default",)


class SinConfig(GenericNodePartitionerConfig):
    ops = ("aten.sin.default",)


class SliceCopyConfig(GenericNodePartitionerConfig):
    ops = ("aten.slice_copy.Tensor",)
    precisions = FP32_AND_STATIC


class SoftmaxConfig(GenericNodePartitionerConfig):
    ops = (
        "aten._softmax.default",
        "aten._log_softmax.default",
    )


class SquareRootConfig(GenericNodePartitionerConfig):
    ops = ("aten.sqrt.default",)


class SubConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.sub.Tensor",
        "aten.sub.Scalar",
    )
    precisions = FP32_AND_STATIC


class TanhConfig(GenericNodePartitionerConfig):
    ops = ("aten.tanh.default",)


class ToDimOrderCopyConfig(GenericNodePartitionerConfig):
    ops = (
        "dim_order_ops._to_dim_order_copy.default",
        "aten._to_copy.default",
    )
    precisions = FP32_AND_STATIC


class UnsqueezeCopyConfig(GenericNodePartitionerConfig):
    ops = ("aten.unsqueeze_copy.default",)
    precisions = FP32_AND_STATIC


class UpsampleBilinear2dConfig(GenericNodePartitionerConfig):
    ops = ("aten.upsample_bilinear2d.vec",)
    original_aten = "aten.upsample_bilinear2d.vec"


class ViewCopyConfig(GenericNodePartitionerConfig):
    ops = (
        "aten.view_copy.default",
        "aten.squeeze_copy.dims",
        "aten.squeeze_copy.dim",
    )
    precisions = FP32_AND_STATIC


class ScaledDotProductAttentionConfig(GenericNodePartitionerConfig):
    ops = ("aten.scaled_dot_product_attention.default",)
    original_aten = "aten.scaled_dot_product_attention.default"
