"""The XNNPACK export recipes (``executorch.backends.xnnpack.recipes``); importing this package registers
``XNNPACKRecipeProvider`` with ``edgetorch.export.recipe_registry``. Imports torch."""

from edgetorch.backends.xnnpack.recipes.xnnpack_recipe_provider import XNNPACKRecipeProvider
from edgetorch.backends.xnnpack.recipes.xnnpack_recipe_types import XNNPackRecipeType
from edgetorch.export.recipe_registry import recipe_registry

recipe_registry.register_backend_recipe_provider(XNNPACKRecipeProvider())

__all__ = ["XNNPACKRecipeProvider", "XNNPackRecipeType"]
