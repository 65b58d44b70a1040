"""``recipe_registry``: the one registry of backend recipe providers, by backend name. Imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgetorch.export.recipe_provider import BackendRecipeProvider

if TYPE_CHECKING:
    from edgetorch.export.recipe import ExportRecipe, RecipeType

__all__ = ["RecipeRegistry", "recipe_registry"]


class RecipeRegistry:
    """Backend name -> its ``BackendRecipeProvider``; registering a name again replaces its provider.

    There is one registry: ``RecipeRegistry()`` returns the same object each time (``recipe_registry``).
    """

    _instance: RecipeRegistry | None = None
    _initialized = False

    def __new__(cls) -> RecipeRegistry:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __init__(self) -> None:
        if not RecipeRegistry._initialized:
            self._providers: dict[str, BackendRecipeProvider] = {}
            RecipeRegistry._initialized = True

    def register_backend_recipe_provider(self, provider: BackendRecipeProvider) -> None:
        if not isinstance(provider, BackendRecipeProvider):
            raise TypeError(f"expected a BackendRecipeProvider; found {type(provider).__name__}")
        self._providers[provider.backend_name] = provider

    def _provider(self, backend: str) -> BackendRecipeProvider:
        if backend not in self._providers:
            raise ValueError(
                f"Backend '{backend}' not available. Available: {list(self._providers)}; import the backend's "
                f"recipes package (e.g. edgetorch.backends.xnnpack.recipes) to register its recipes"
            )
        return self._providers[backend]

    def create_recipe(self, recipe_type: RecipeType, backend: str, **kwargs: Any) -> ExportRecipe | None:
        """``backend``'s recipe for ``recipe_type``, or None if its provider does not build it."""
        return self._provider(backend).create_recipe(recipe_type, **kwargs)

    def list_backends(self) -> list[str]:
        """The names of the backends with a registered provider."""
        return list(self._providers)

    def get_supported_recipes(self, backend: str) -> list[RecipeType]:
        return list(self._provider(backend).get_supported_recipes())


recipe_registry = RecipeRegistry()
