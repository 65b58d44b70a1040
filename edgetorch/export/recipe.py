"""Export recipes: what ``edgetorch.export.export`` does to a model, as data.

An ``ExportRecipe`` holds an optional ``QuantizationRecipe`` (PT2E quantizers,
or torchao ``quantize_`` configs applied to the source model), a
``LoweringRecipe`` (partitioners, Edge passes, Edge compile config) and the
``ExecutorchBackendConfig``. Backends publish ready-made recipes under a
``RecipeType`` (``XNNPackRecipeType.FP32``) through the recipe registry;
``ExportRecipe.get_recipe`` looks one up. Imports torch.
"""

from __future__ import annotations

import copy
import dataclasses
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
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


GraphPass = Callable[[torch.fx.GraphModule], torch.fx.GraphModule]


@dataclass
class QuantizationRecipe:
    """How the model is quantized before lowering: PT2E ``quantizers`` (prepared, calibrated, converted), or
    torchao ``ao_quantization_configs`` applied to the eager model.

    PT2E runs post-training (calibrated on ``calibration_inputs_fn()``'s inputs, or the example inputs) or,
    with ``is_qat``, quantization-aware (``train_fn`` trains the prepared module). ``dynamic_batch_size``
    lets the batch dimension of the calibration or training inputs differ from the example inputs'. The
    ``*_passes`` are GraphModule -> GraphModule callables run before/after prepare and before/after convert.
    """

    quantizers: list[Any] | None = None
    ao_quantization_configs: list[AOQuantizationConfig] | None = None
    is_qat: bool = False
    dynamic_batch_size: bool = False
    calibration_inputs_fn: Callable[[], Iterable[tuple]] | None = None
    train_fn: Callable[[torch.fx.GraphModule], None] | None = None
    pre_prepare_passes: list[GraphPass] | None = None
    post_prepare_passes: list[GraphPass] | None = None
    pre_convert_passes: list[GraphPass] | None = None
    post_convert_passes: list[GraphPass] | None = None

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
            raise ValueError(
                f"Invalid recipe type: {recipe!r}; expected a RecipeType member (e.g. XNNPackRecipeType.FP32)"
            )
        backend = recipe.get_backend_name()
        built = recipe_registry.create_recipe(recipe, backend, **kwargs)
        if built is None:
            supported = [r.value for r in recipe_registry.get_supported_recipes(backend)]
            raise ValueError(f"Recipe '{recipe.value}' not supported by '{backend}'. Supported: {supported}")
        return built

    @classmethod
    def combine(cls, recipes: list[ExportRecipe], recipe_name: str | None = None) -> ExportRecipe:
        """One recipe doing what all of ``recipes`` do (e.g. two backends' recipes, partitioners in order).

        Lists (partitioners, quantizers, passes) are concatenated in recipe order; settings that cannot
        be merged (``strict``, ``mode``, ``pipeline_stages``, ``source_transform_in_place``, ``is_qat``,
        the Edge compile config) must agree, and at most one recipe may give a ``train_fn``. The first
        ``executorch_backend_config`` given is used. A single recipe is returned as it is.
        """
        if not recipes:
            raise ValueError("Recipes cannot be empty: pass at least one ExportRecipe to combine")
        if len(recipes) == 1:
            return recipes[0]
        for name in ("strict", "mode", "pipeline_stages", "source_transform_in_place"):
            values = [getattr(r, name) for r in recipes]
            _require_agreement(name, [tuple(v) if isinstance(v, list) else v for v in values])
        backend_config = next((r.executorch_backend_config for r in recipes if r.executorch_backend_config), None)
        return cls(
            name=recipe_name or "_".join(r.name for r in recipes if r.name is not None),
            quantization_recipe=_combine_quantization([r.quantization_recipe for r in recipes]),
            aten_transform_passes=_concat(r.aten_transform_passes for r in recipes),
            source_transform_in_place=recipes[0].source_transform_in_place,
            lowering_recipe=_combine_lowering(recipes),
            executorch_backend_config=copy.deepcopy(backend_config),
            pipeline_stages=next((r.pipeline_stages for r in recipes if r.pipeline_stages), None),
            mode=recipes[0].mode,
            strict=recipes[0].strict,
        )


def _require_agreement(name: str, values: list[Any]) -> None:
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        raise ValueError(f"Cannot combine recipes with conflicting '{name}' values: {distinct}; make them agree first")


def _concat(lists: Iterable[Sequence[Any] | None]) -> list[Any] | None:
    """The lists joined in order; None when all are empty or None."""
    joined = [item for items in lists for item in items or ()]
    return joined or None


_QUANT_PASSES = ("pre_prepare_passes", "post_prepare_passes", "pre_convert_passes", "post_convert_passes")


def _combine_quantization(recipes: list[QuantizationRecipe | None]) -> QuantizationRecipe | None:
    present = [r for r in recipes if r is not None]
    if not present:
        return None
    _require_agreement("is_qat", [r.is_qat for r in present])
    train_fns = [r.train_fn for r in present if r.train_fn is not None]
    if len(train_fns) > 1:
        raise ValueError("Cannot combine recipes: more than one recipe provides a train_fn; keep one")
    calibrations = [r.calibration_inputs_fn for r in present if r.calibration_inputs_fn is not None]
    passes = {name: _concat(getattr(r, name) for r in present) for name in _QUANT_PASSES}
    quantizers = _concat(r.quantizers for r in present)
    ao_configs = _concat(r.ao_quantization_configs for r in present)
    if not (quantizers or ao_configs or any(passes.values())):
        return None
    return QuantizationRecipe(
        quantizers=quantizers,
        ao_quantization_configs=ao_configs,
        is_qat=present[0].is_qat,
        dynamic_batch_size=any(r.dynamic_batch_size for r in present),
        calibration_inputs_fn=_chained(calibrations) if len(calibrations) > 1 else next(iter(calibrations), None),
        train_fn=next(iter(train_fns), None),
        **passes,
    )


def _chained(calibrations: list[Callable[[], Iterable[tuple]]]) -> Callable[[], Iterable[tuple]]:
    """A calibration input factory yielding every factory's inputs, in order."""

    def inputs() -> Iterable[tuple]:
        for calibration in calibrations:
            yield from calibration()

    return inputs


_UNORDERED = ("preserve_ops", "_core_aten_ops_exception_list")


def _edge_config_key(config: Any) -> tuple:
    """A config's fields as a comparable value; the op lists compare as sets (their order means nothing)."""
    return tuple(
        frozenset(getattr(config, f.name) or ()) if f.name in _UNORDERED else getattr(config, f.name)
        for f in dataclasses.fields(config)
    )


def _render(value: Any, name: str) -> str:
    return str(sorted(str(op) for op in value or ())) if name in _UNORDERED else str(value)


def _combine_lowering(recipes: list[ExportRecipe]) -> LoweringRecipe | None:
    lowerings = [r.lowering_recipe for r in recipes if r.lowering_recipe is not None]
    by_method = [lr.partitioners for lr in lowerings if isinstance(lr.partitioners, Mapping) and lr.partitioners]
    flat = _concat(lr.partitioners for lr in lowerings if not isinstance(lr.partitioners, Mapping))
    if flat and by_method:
        raise ValueError(
            "Cannot combine recipes that mix list-valued and dict-valued partitioners; "
            "convert the list-valued recipe to per-method form"
        )
    partitioners: list[Any] | dict[str, list[Any]] | None = flat
    if by_method:
        partitioners = {}
        for per_method in by_method:
            for method, listed in per_method.items():
                partitioners.setdefault(method, []).extend(listed)
    # Configs are compared by value: each provider builds a new one, and equal ones are no conflict.
    configs: list[tuple[str, Any]] = []
    for i, recipe in enumerate(recipes):
        config = recipe.lowering_recipe.edge_compile_config if recipe.lowering_recipe else None
        if config is not None and all(_edge_config_key(config) != _edge_config_key(c) for _, c in configs):
            configs.append((recipe.name or f"recipes[{i}]", config))
    if len(configs) > 1:
        keys = [_edge_config_key(c) for _, c in configs]
        fields = dataclasses.fields(configs[0][1])
        differ = [f.name for i, f in enumerate(fields) if any(k[i] != keys[0][i] for k in keys[1:])]
        detail = "; ".join(
            f"{name} (" + ", ".join(f"{who}={_render(getattr(c, name), name)}" for who, c in configs) + ")"
            for name in differ
        )
        raise ValueError(f"Cannot combine recipes whose edge_compile_configs disagree on {detail}")
    edge_transform = _concat(lr.edge_transform_passes for lr in lowerings)
    manager_transform = _concat(lr.edge_manager_transform_passes for lr in lowerings)
    if not (partitioners or edge_transform or manager_transform or configs):
        return None
    from edgetorch.exir.capture._config import EdgeCompileConfig

    return LoweringRecipe(
        partitioners=partitioners or None,
        edge_transform_passes=edge_transform,
        edge_manager_transform_passes=manager_transform,
        edge_compile_config=copy.deepcopy(configs[0][1]) if configs else EdgeCompileConfig(),
    )
