"""``recipe_registry``: the one registry of backend recipe providers, by backend name. Imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgetorch.export.recipe_provider import BackendRecipeProvider

if TYPE_CHECKING:
    from edgetorch.export.recipe import ExportRecipe, RecipeType

__all__ = ["RecipeRegistry", "recipe_registry"]


class RecipeRegistry:
    """Backend name -> its ``BackendRecipeProvider``; registering a name again replaces its provider."""

    def __init__(self) -> None:
        self._providers: dict[str, BackendRecipeProvider] = {}

    def register_backend_recipe_provider(self, provider: BackendRecipeProvider) -> None:
        if not isinstance(provider, BackendRecipeProvider):
            raise TypeError(f"expected a BackendRecipeProvider; found {type(provider).__name__}")
        self._providers[provider.backend_name] = provider

    def create_recipe(self, recipe_type: RecipeType, backend: str, **kwargs: Any) -> ExportRecipe | None:
        """``backend``'s recipe for ``recipe_type``, or None if no registered provider builds it."""
        provider = self._providers.get(backend)
        if provider is None or not provider.supports_recipe(recipe_type):
            return None
        return provider.create_recipe(recipe_type, **kwargs)

    def get_supported_backends(self) -> list[str]:
        return list(self._providers)

    def get_supported_recipes(self, backend: str) -> list[RecipeType]:
        provider = self._providers.get(backend)
        return list(provider.get_supported_recipes()) if provider else []


recipe_registry = RecipeRegistry()
