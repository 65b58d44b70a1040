"""``XNNPackRecipeType``: the XNNPACK export recipes, with ExecuTorch's names and values. Imports torch."""

from __future__ import annotations

from edgetorch.export.recipe import RecipeType

__all__ = ["XNNPackRecipeType"]


class XNNPackRecipeType(RecipeType):
    FP32 = "xnnpack_fp32"
    PT2E_INT8_DYNAMIC_PER_CHANNEL = "xnnpack_pt2e_int8_dynamic_per_channel"
    PT2E_INT8_STATIC_PER_CHANNEL = "xnnpack_pt2e_int8_static_per_channel"
    """Static int8: calibrated on every example input."""
    PT2E_INT8_STATIC_PER_TENSOR = "xnnpack_pt2e_int8_static_per_tensor"
    TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_CHANNEL = "xnnpack_torchao_int8da_int4w_per_channel"
    TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR = "xnnpack_torchao_int8da_int4w_per_tensor"
    """int4 weights in groups along the input (``group_size``, default 32), int8 dynamic activations."""

    @classmethod
    def get_backend_name(cls) -> str:
        return "xnnpack"
