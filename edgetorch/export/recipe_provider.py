"""``BackendRecipeProvider``: what a backend implements to publish its export recipes. Imports torch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgetorch.export.recipe import ExportRecipe, RecipeType


__all__ = ["BackendRecipeProvider"]


class BackendRecipeProvider(ABC):
    """Builds a backend's ``ExportRecipe`` for each of its ``RecipeType`` members."""

    @property
    @abstractmethod
    def backend_name(self) -> str:
        """The name recipes of this backend report from ``RecipeType.get_backend_name``."""

    @abstractmethod
    def get_supported_recipes(self) -> Sequence[RecipeType]:
        """The recipe types this provider builds."""

    @abstractmethod
    def create_recipe(self, recipe_type: RecipeType, **kwargs: Any) -> ExportRecipe | None:
        """The recipe for ``recipe_type`` (None if this provider does not build it)."""

    def supports_recipe(self, recipe_type: RecipeType) -> bool:
        return recipe_type in self.get_supported_recipes()
