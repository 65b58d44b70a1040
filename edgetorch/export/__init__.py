"""``edgetorch.export``: ExecuTorch's recipe-driven export (``executorch.export``).

``export(model, example_inputs, export_recipe=ExportRecipe.get_recipe(XNNPackRecipeType.FP32))``
runs quantization, ``torch.export``, lowering and ``to_executorch`` in one call
and returns an ``ExportSession`` holding every stage's result. Imports torch.
"""

from edgetorch.export.export import ExportSession, PipelineArtifact, export
from edgetorch.export.recipe import (
    AOQuantizationConfig,
    ExportRecipe,
    LoweringRecipe,
    Mode,
    QuantizationRecipe,
    RecipeType,
)
from edgetorch.export.recipe_provider import BackendRecipeProvider
from edgetorch.export.recipe_registry import recipe_registry
from edgetorch.export.types import StageType

__all__ = [
    "AOQuantizationConfig",
    "BackendRecipeProvider",
    "ExportRecipe",
    "ExportSession",
    "LoweringRecipe",
    "Mode",
    "PipelineArtifact",
    "QuantizationRecipe",
    "RecipeType",
    "StageType",
    "export",
    "recipe_registry",
]
