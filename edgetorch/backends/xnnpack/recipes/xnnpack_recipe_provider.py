"""``XNNPACKRecipeProvider``: builds the ``ExportRecipe`` of each ``XNNPackRecipeType``.

Every recipe lowers with ``XnnpackPartitioner`` (all configs) and the XNNPACK
Edge and ExecuTorch configs; the PT2E recipes quantize with ``XNNPACKQuantizer``
(symmetric, per-channel or per-tensor, static or dynamic), the torchao ones with
``Int8DynamicActivationIntxWeightConfig`` (int4 weights per channel, or in
groups of ``group_size``). Imports torch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
    get_xnnpack_edge_compile_config,
)
from edgetorch.backends.xnnpack.recipes.xnnpack_recipe_types import XNNPackRecipeType
from edgetorch.backends.xnnpack.utils.configs import get_xnnpack_executorch_backend_config
from edgetorch.export.recipe import (
    AOQuantizationConfig,
    ExportRecipe,
    LoweringRecipe,
    QuantizationRecipe,
    RecipeType,
)
from edgetorch.export.recipe_provider import BackendRecipeProvider

__all__ = ["XNNPACKRecipeProvider"]

logger = logging.getLogger(__name__)

R = XNNPackRecipeType
PT2E = {  # recipe -> (is_per_channel, is_dynamic)
    R.PT2E_INT8_DYNAMIC_PER_CHANNEL: (True, True),
    R.PT2E_INT8_STATIC_PER_CHANNEL: (True, False),
    R.PT2E_INT8_STATIC_PER_TENSOR: (False, False),
}


class XNNPACKRecipeProvider(BackendRecipeProvider):
    @property
    def backend_name(self) -> str:
        return XNNPackRecipeType.get_backend_name()

    def get_supported_recipes(self) -> Sequence[RecipeType]:
        return list(XNNPackRecipeType)

    def create_recipe(self, recipe_type: RecipeType, **kwargs: Any) -> ExportRecipe | None:
        """The recipe for ``recipe_type``; only the grouped torchao recipe takes an option (``group_size``)."""
        if recipe_type not in self.get_supported_recipes():
            return None
        takes = {"group_size"} if recipe_type == R.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR else set()
        if set(kwargs) - takes:
            logger.warning("recipe %s ignores options %s", recipe_type.value, sorted(set(kwargs) - takes))
        group_size = kwargs.get("group_size", 32)
        if not isinstance(group_size, int) or isinstance(group_size, bool) or group_size <= 0:
            raise ValueError(
                f"Parameter 'group_size' must be an integer, got {type(group_size).__name__}: {group_size}; "
                "pass a positive int (a multiple of 32 for XNNPACK)"
            )
        quantization = None
        if recipe_type in PT2E:
            quantization = _pt2e(*PT2E[recipe_type])
        elif recipe_type == R.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_CHANNEL:
            quantization = _torchao(group_size=None)
        elif recipe_type == R.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR:
            quantization = _torchao(group_size=group_size)
        return ExportRecipe(
            name=recipe_type.value,
            quantization_recipe=quantization,
            lowering_recipe=LoweringRecipe(
                partitioners=[XnnpackPartitioner()], edge_compile_config=get_xnnpack_edge_compile_config()
            ),
            executorch_backend_config=get_xnnpack_executorch_backend_config(),
        )


def _pt2e(is_per_channel: bool, is_dynamic: bool) -> QuantizationRecipe:
    from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )

    config = get_symmetric_quantization_config(is_per_channel=is_per_channel, is_dynamic=is_dynamic)
    return QuantizationRecipe(quantizers=[XNNPACKQuantizer().set_global(config)])


def _torchao(group_size: int | None) -> QuantizationRecipe:
    from torchao.quantization.granularity import PerAxis, PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    granularity = PerAxis(axis=0) if group_size is None else PerGroup(group_size=group_size)
    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=granularity)  # type: ignore[attr-defined]
    return QuantizationRecipe(ao_quantization_configs=[AOQuantizationConfig(config)])
