"""Export recipes: what ``edgetorch.export.export`` does to a model, as data.

An ``ExportRecipe`` holds an optional ``QuantizationRecipe`` (PT2E quantizers,
or torchao ``quantize_`` configs applied to the source model), a
``LoweringRecipe`` (partitioners, Edge passes, Edge compile config) and the
``ExecutorchBackendConfig``. Backends publish ready-made recipes under a
``RecipeType`` (``XNNPackRecipeType.FP32``) through the recipe registry;
``ExportRecipe.get_recipe`` looks one up. Imports torch.
"""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum, EnumMeta, StrEnum
from typing import Any

import torch

from edgetorch.export.types import StageType

__all__ = [
    "AOQuantizationConfig",
    "ExportRecipe",
    "LoweringRecipe",
    "Mode",
    "QuantizationRecipe",
    "RecipeType",
]


class RecipeTypeMeta(EnumMeta, ABCMeta):
    """Lets ``RecipeType`` be both an Enum and an abstract base."""


class RecipeType(Enum, metaclass=RecipeTypeMeta):
    """Base of each backend's enum of recipes; a member's value is the recipe's name."""

    @classmethod
    @abstractmethod
    def get_backend_name(cls) -> str:
        """The backend whose recipe provider builds these recipes (``"xnnpack"``)."""


class Mode(StrEnum):
    """Whether the recipe is meant for debugging or release (recorded with the recipe)."""

    DEBUG = "debug"
    RELEASE = "release"


@dataclass
class AOQuantizationConfig:
    """A torchao config for ``quantize_``, and which modules it applies to (``filter_fn(module, fqn)``)."""

    ao_base_config: Any
    filter_fn: Callable[[torch.nn.Module, str], bool] | None = None


@dataclass
class QuantizationRecipe:
    """How the model is quantized before lowering: PT2E ``quantizers`` (prepared, calibrated on every example
    input, converted), or torchao ``ao_quantization_configs`` applied to the eager model."""

    quantizers: list[Any] | None = None
    ao_quantization_configs: list[AOQuantizationConfig] | None = None
    is_qat: bool = False
    calibration_inputs_fn: Callable[[], Iterable[tuple]] | None = None

    def get_quantizers(self) -> list[Any] | None:
        return self.quantizers


@dataclass
class LoweringRecipe:
    """How the exported program is lowered: partitioners (a list, or one list per method), passes run on the
    Edge programs while lowering, passes run on the EdgeProgramManager afterwards, and the Edge compile config."""

    partitioners: list[Any] | dict[str, list[Any]] | None = None
    edge_transform_passes: Sequence[Any] | None = None
    edge_manager_transform_passes: Sequence[Any] | None = None
    edge_compile_config: Any = None


@dataclass
class ExportRecipe:
    """Everything ``export`` needs to turn a model into a program (all parts optional)."""

    name: str | None = None
    quantization_recipe: QuantizationRecipe | None = None
    aten_transform_passes: (
        Sequence[Callable[[str, torch.export.ExportedProgram], torch.export.ExportedProgram]] | None
    ) = None
    source_transform_in_place: bool = False
    lowering_recipe: LoweringRecipe | None = None
    executorch_backend_config: Any = None
    pipeline_stages: list[StageType] | None = None
    mode: Mode = Mode.RELEASE
    strict: bool = True

    @classmethod
    def get_recipe(cls, recipe: RecipeType, **kwargs: Any) -> ExportRecipe:
        """The recipe ``recipe``'s backend provides (its provider must be registered: importing a backend's
        ``recipes`` package registers it), built with ``kwargs``."""
        from edgetorch.export.recipe_registry import recipe_registry

        if not isinstance(recipe, RecipeType):
            raise ValueError(f"expected a RecipeType member (e.g. XNNPackRecipeType.FP32); found {recipe!r}")
        built = recipe_registry.create_recipe(recipe, recipe.get_backend_name(), **kwargs)
        if built is None:
            raise ValueError(
                f"no recipe provider for backend {recipe.get_backend_name()!r} builds {recipe.value!r}; "
                f"import the backend's recipes package (e.g. edgetorch.backends.xnnpack.recipes) to register it"
            )
        return built
