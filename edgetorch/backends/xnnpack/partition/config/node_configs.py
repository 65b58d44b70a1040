"""Configs of operators with more than one output or an extra parameter: batch norm, max over a dim, PReLU."""

from __future__ import annotations

from edgetorch.backends.xnnpack.partition.config.xnnpack_config import XNNPartitionerConfig

__all__ = ["BatchNormConfig", "MaxDimConfig", "PreluConfig"]


class BatchNormConfig(XNNPartitionerConfig):
    ops = ("aten._native_batch_norm_legit_no_training.default",)


class MaxDimConfig(XNNPartitionerConfig):
    ops = ("aten.max.dim",)


class PreluConfig(XNNPartitionerConfig):
    ops = ("aten.prelu.default",)
    original_aten = "aten.prelu.default"
