"""The stages of an export pipeline, one class each, as ``executorch.export.stages``.

A stage takes the previous stage's ``PipelineArtifact`` (its ``data``: models, exported programs or a
program manager, all by method name; its ``context``: example inputs, dynamic shapes, constant
methods, whether to record an ETRecord, ...) and leaves its own in ``get_artifacts()``. Each says
which stages it may follow (``valid_predecessor_stages``) and whether it may start a pipeline.
``ExportSession`` builds them from a recipe; they can also be run by hand. Imports torch and torchao.
"""

from __future__ import annotations

import copy
import itertools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.fx.passes.infra.pass_manager import PassManager as GraphModulePassManager
from torchao.quantization import quantize_
from torchao.quantization.pt2e import (
    allow_exported_model_train_eval,
    move_exported_model_to_eval,
    move_exported_model_to_train,
)
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e
from torchao.quantization.pt2e.quantizer import ComposableQuantizer
from torchao.quantization.pt2e.quantizer import Quantizer as TorchAOPT2EQuantizer
from torchao.utils import unwrap_tensor_subclass

from edgetorch.devtools.backend_debug import get_delegation_info
from edgetorch.exir import EdgeProgramManager, to_edge, to_edge_transform_and_lower
from edgetorch.exir.backend.backend_api import validation_disabled
from edgetorch.export.recipe import LoweringRecipe, QuantizationRecipe
from edgetorch.export.types import StageType

__all__ = [
    "EdgeProgramManagerTransformStage",
    "EdgeTransformAndLowerStage",
    "ExecutorchStage",
    "PipelineArtifact",
    "QuantizeStage",
    "SourceTransformStage",
    "Stage",
    "ToBackendStage",
    "ToEdgeStage",
    "TorchExportStage",
]

logger = logging.getLogger(__name__)


class PipelineArtifact:
    """What a stage produced (``data``) and what the stages share about the run (``context``)."""

    def __init__(self, data: Any, context: dict[str, Any]) -> None:
        self.data = data
        self.context = context

    def add_context(self, key: str, value: Any) -> None:
        self.context[key] = value

    def get_context(self, key: str, default: Any = None) -> Any:
        return self.context.get(key, default)

    def copy_with_new_data(self, new_data: Any) -> PipelineArtifact:
        """The next stage's artifact: ``new_data`` with a copy of this context."""
        return PipelineArtifact(data=new_data, context=self.context.copy())


class Stage(ABC):
    """One step of the pipeline: ``run(artifact)`` then ``get_artifacts()``.

    A stage names its ``stage_type``, the ``valid_predecessor_stages`` it may directly follow and whether
    it ``can_start_pipeline``; the built-in stages give them as class attributes.
    """

    def __init__(self) -> None:
        self._artifact: PipelineArtifact | None = None

    @property
    @abstractmethod
    def stage_type(self) -> StageType:
        """Which step this is."""

    @property
    @abstractmethod
    def valid_predecessor_stages(self) -> list[StageType]:
        """The stages this one may directly follow."""

    @property
    @abstractmethod
    def can_start_pipeline(self) -> bool:
        """Whether a pipeline may begin with this stage."""

    @abstractmethod
    def run(self, artifact: PipelineArtifact) -> None:
        """Do the step on ``artifact`` and keep the result for ``get_artifacts``."""

    def get_artifacts(self) -> PipelineArtifact:
        if self._artifact is None:
            raise RuntimeError(f"Stage: {type(self).__name__} not executed; call run(artifact) first")
        return self._artifact


def _resolve_transform_passes(
    programs: dict[str, ExportedProgram], factories: Sequence[Callable[[str, ExportedProgram], Any]]
) -> Any:
    """Ask each ``factory(method, program)`` for passes: a PassManager one returns is used alone, for every
    method; otherwise the lists are gathered per method (methods without passes left out). None if none."""
    per_method: dict[str, list[Any]] = {}
    for method, program in programs.items():
        for factory in factories:
            if not callable(factory):
                raise ValueError(
                    "Transform passes must be a callable that resolves to passes: f(method_name, program) -> "
                    f"list of passes or PassManager; found {type(factory).__name__}"
                )
            passes = factory(method, program)
            if isinstance(passes, GraphModulePassManager):
                return passes
            per_method.setdefault(method, []).extend(passes)
    return {m: p for m, p in per_method.items() if p} or None


def _add_delegation_info_context(artifact: PipelineArtifact, manager: EdgeProgramManager) -> None:
    """Record what got delegated: per method, and for ``forward`` (or the first method) on its own."""
    by_method = {
        name: get_delegation_info(manager.exported_program(name).graph_module) for name in sorted(manager.methods)
    }
    artifact.add_context("delegation_info_by_method", by_method)
    artifact.add_context("delegation_info", by_method.get("forward", next(iter(by_method.values()), None)))


class _ReportsDelegation:
    """The delegation summary a lowering stage leaves in its artifact's context."""

    @property
    def delegation_info(self) -> Any:
        return self.get_artifacts().get_context("delegation_info")  # type: ignore[attr-defined]

    @property
    def delegation_info_by_method(self) -> dict[str, Any]:
        return self.get_artifacts().get_context("delegation_info_by_method")  # type: ignore[attr-defined]


class SourceTransformStage(Stage):
    """Applies the recipe's torchao config (``quantize_``) to the eager models, on copies unless ``in_place``."""

    def __init__(self, quantization_recipe: QuantizationRecipe | None, in_place: bool = False) -> None:
        super().__init__()
        self._quantization_recipe = quantization_recipe
        self._in_place = in_place
        self._transformed_models: dict[str, nn.Module] = {}

    stage_type = StageType.SOURCE_TRANSFORM
    valid_predecessor_stages = []
    can_start_pipeline = True

    def run(self, artifact: PipelineArtifact) -> None:
        recipe = self._quantization_recipe
        if not recipe or not recipe.ao_quantization_configs:
            logger.info("no torchao config in the quantization recipe: the source transform leaves the models")
            self._artifact = artifact
            return
        if len(recipe.ao_quantization_configs) > 1:
            raise ValueError(
                "AO quantization configs cannot be reliably composed together, multiple quantization configs "
                f"are disallowed for source transform ({len(recipe.ao_quantization_configs)} given); keep one"
            )
        config = recipe.ao_quantization_configs[0]
        self._transformed_models = artifact.data if self._in_place else copy.deepcopy(artifact.data)
        for model in self._transformed_models.values():
            quantize_(model, config.ao_base_config, config.filter_fn)
            unwrap_tensor_subclass(model)
        self._artifact = artifact.copy_with_new_data(self._transformed_models)


class QuantizeStage(Stage):
    """PT2E quantization of each model: capture, prepare, calibrate (or train, for QAT), convert."""

    def __init__(self, quantization_recipe: QuantizationRecipe | None) -> None:
        super().__init__()
        self._quantization_recipe = quantization_recipe

    stage_type = StageType.QUANTIZE
    valid_predecessor_stages = [StageType.SOURCE_TRANSFORM]
    can_start_pipeline = True

    def _get_quantizer_for_prepare_pt2e(self, quantizers: list[Any]) -> Any:
        """One quantizer for prepare: torchao's composed when several, a legacy torch.ao one alone."""
        torchao = [q for q in quantizers if isinstance(q, TorchAOPT2EQuantizer)]
        legacy = [q for q in quantizers if not isinstance(q, TorchAOPT2EQuantizer)]
        if torchao and legacy:
            raise ValueError("Mixed quantizer types are not supported: use torchao PT2E quantizers only")
        if len(legacy) > 1:
            raise ValueError("Multiple quantizers of torch.ao.quantization.quantizer not supported; use one")
        if legacy:
            logger.warning("torch.ao quantizer %s is deprecated; move to a torchao quantizer", legacy[0])
            return legacy[0]
        if torchao:
            return ComposableQuantizer(torchao)
        raise ValueError("No quantizers detected in the quantization recipe")

    @staticmethod
    def _apply_passes(model: torch.fx.GraphModule, passes: list[Callable] | None) -> torch.fx.GraphModule:
        for graph_pass in passes or []:
            try:
                model = graph_pass(model)
            except Exception as error:
                raise RuntimeError(f"QuantizeStage: Pass '{graph_pass!r}' raised an error: {error}") from error
        return model

    def run(self, artifact: PipelineArtifact) -> None:
        recipe = self._quantization_recipe
        if not recipe or not recipe.quantizers:
            logger.info("no quantizers in the quantization recipe: the quantize stage leaves the models")
            self._artifact = artifact
            return
        example_inputs = artifact.get_context("example_inputs")
        quantized = {}
        for method, model in artifact.data.items():
            if method not in example_inputs or not example_inputs[method]:
                raise ValueError(f"Example inputs for method {method} not found or empty; give at least one")
            inputs = example_inputs[method][0]
            shapes = None
            if recipe.dynamic_batch_size:
                # calibration or training batches may differ in size from the example inputs
                batch = torch.export.Dim("batch", min=1)
                shapes = tuple({0: batch} if isinstance(t, torch.Tensor) else None for t in inputs)
            if recipe.is_qat:
                model.train()  # batch norm and dropout are captured with their training behaviour
            captured = torch.export.export(model, inputs, dynamic_shapes=shapes, strict=True).module()
            captured = self._apply_passes(captured, recipe.pre_prepare_passes)
            quantizer = self._get_quantizer_for_prepare_pt2e(recipe.quantizers)
            if recipe.is_qat:
                if recipe.train_fn is None:
                    raise ValueError("train_fn must be provided when is_qat=True: it trains the prepared module")
                prepared = self._apply_passes(prepare_qat_pt2e(captured, quantizer), recipe.post_prepare_passes)
                allow_exported_model_train_eval(prepared)
                move_exported_model_to_train(prepared)
                recipe.train_fn(prepared)
                move_exported_model_to_eval(prepared)
            else:
                prepared = self._apply_passes(prepare_pt2e(captured, quantizer), recipe.post_prepare_passes)
                calibration = recipe.calibration_inputs_fn
                for sample in calibration() if calibration is not None else example_inputs[method]:
                    prepared(*sample)
            prepared = self._apply_passes(prepared, recipe.pre_convert_passes)
            quantized[method] = self._apply_passes(convert_pt2e(prepared), recipe.post_convert_passes)
        self._artifact = artifact.copy_with_new_data(quantized)


class TorchExportStage(Stage):
    """``torch.export`` of each model on its first example input, then the recipe's ATen passes."""

    def __init__(
        self,
        aten_transform_passes: list[Callable[[str, ExportedProgram], ExportedProgram]] | None = None,
        strict: bool = True,
    ) -> None:
        super().__init__()
        self._aten_transform_passes = aten_transform_passes
        self.strict = strict

    stage_type = StageType.TORCH_EXPORT
    valid_predecessor_stages = [StageType.SOURCE_TRANSFORM, StageType.QUANTIZE]
    can_start_pipeline = True

    def run(self, artifact: PipelineArtifact) -> None:
        example_inputs = artifact.get_context("example_inputs")
        dynamic_shapes = artifact.get_context("dynamic_shapes", {}) or {}
        programs = {}
        with torch.no_grad():
            for method, model in artifact.data.items():
                if method not in example_inputs:
                    raise ValueError(f"Example inputs for method {method} not found; give example_inputs[{method!r}]")
                program = torch.export.export(
                    model, example_inputs[method][0], dynamic_shapes=dynamic_shapes.get(method), strict=self.strict
                )
                for aten_pass in self._aten_transform_passes or []:
                    if not callable(aten_pass):
                        raise ValueError(
                            "Aten transform passes must be a callable that can transform and return an exported "
                            f"program: f(method_name, program) -> program; found {type(aten_pass).__name__}"
                        )
                    program = aten_pass(method, program)
                programs[method] = program
        self._artifact = artifact.copy_with_new_data(programs)


class EdgeTransformAndLowerStage(_ReportsDelegation, Stage):
    """``to_edge_transform_and_lower`` with the recipe's partitioners, Edge passes and compile config."""

    def __init__(
        self,
        partitioners: list[Any] | dict[str, list[Any]] | None = None,
        transform_passes: list[Callable[[str, ExportedProgram], Any]] | None = None,
        compile_config: Any = None,
    ) -> None:
        super().__init__()
        self._partitioners = partitioners
        self._transform_passes = transform_passes
        self._compile_config = compile_config

    @classmethod
    def from_recipe(cls, lowering_recipe: LoweringRecipe | None) -> EdgeTransformAndLowerStage:
        if lowering_recipe is None:
            return cls()
        return cls(
            partitioners=lowering_recipe.partitioners,
            transform_passes=lowering_recipe.edge_transform_passes,
            compile_config=lowering_recipe.edge_compile_config,
        )

    stage_type = StageType.TO_EDGE_TRANSFORM_AND_LOWER
    valid_predecessor_stages = [StageType.TORCH_EXPORT]
    can_start_pipeline = True

    def run(self, artifact: PipelineArtifact) -> None:
        programs = artifact.data
        passes = _resolve_transform_passes(programs, self._transform_passes or [])
        with validation_disabled():
            manager = to_edge_transform_and_lower(
                programs,
                partitioner=self._partitioners,
                transform_passes=passes,
                constant_methods=artifact.get_context("constant_methods"),
                compile_config=self._compile_config,
                generate_etrecord=artifact.get_context("generate_etrecord", False),
            )
        self._artifact = artifact.copy_with_new_data(manager)
        _add_delegation_info_context(self._artifact, manager)


class ToEdgeStage(Stage):
    """``to_edge`` of the exported programs (lowering comes later, in TO_BACKEND)."""

    def __init__(self, edge_compile_config: Any = None) -> None:
        super().__init__()
        self._edge_compile_config = edge_compile_config

    @classmethod
    def from_recipe(cls, lowering_recipe: LoweringRecipe | None) -> ToEdgeStage:
        return cls() if lowering_recipe is None else cls(edge_compile_config=lowering_recipe.edge_compile_config)

    stage_type = StageType.TO_EDGE
    valid_predecessor_stages = [StageType.TORCH_EXPORT]
    can_start_pipeline = True

    def run(self, artifact: PipelineArtifact) -> None:
        manager = to_edge(
            artifact.data,
            constant_methods=artifact.get_context("constant_methods"),
            compile_config=self._edge_compile_config,
            generate_etrecord=artifact.get_context("generate_etrecord", False),
        )
        self._artifact = artifact.copy_with_new_data(manager)


class EdgeProgramManagerTransformStage(Stage):
    """Passes on the EdgeProgramManager: the per-method Edge passes, then each factory of
    ``edge_manager_transform_passes`` (given the manager, it returns passes), in order."""

    def __init__(
        self,
        edge_transform_passes: list[Callable[[str, ExportedProgram], Any]] | None = None,
        edge_manager_transform_passes: list[Callable[[EdgeProgramManager], Any]] | None = None,
    ) -> None:
        super().__init__()
        self._edge_transform_passes = edge_transform_passes or []
        self._edge_manager_transform_passes = edge_manager_transform_passes or []

    @classmethod
    def from_recipe(cls, lowering_recipe: LoweringRecipe | None) -> EdgeProgramManagerTransformStage:
        if lowering_recipe is None:
            return cls()
        return cls(
            edge_transform_passes=lowering_recipe.edge_transform_passes,
            edge_manager_transform_passes=lowering_recipe.edge_manager_transform_passes,
        )

    stage_type = StageType.EDGE_PROGRAM_MANAGER_TRANSFORM
    valid_predecessor_stages = [StageType.TO_EDGE, StageType.TO_EDGE_TRANSFORM_AND_LOWER]
    can_start_pipeline = False

    def run(self, artifact: PipelineArtifact) -> None:
        manager = artifact.data
        if not isinstance(manager, EdgeProgramManager):
            raise TypeError(f"Expected EdgeProgramManager but got {type(manager)}; run TO_EDGE first")
        if not self._edge_transform_passes and not self._edge_manager_transform_passes:
            self._artifact = artifact
            return
        programs = {m: manager.exported_program(m) for m in manager.methods}
        passes = _resolve_transform_passes(programs, self._edge_transform_passes)
        if passes is not None:
            manager = manager.transform(passes)
        for factory in self._edge_manager_transform_passes:
            manager_passes = factory(manager)
            if manager_passes:
                manager = manager.transform(manager_passes)
        self._artifact = artifact.copy_with_new_data(manager)


class ToBackendStage(_ReportsDelegation, Stage):
    """``to_backend`` with each partitioner in turn (per method: the i-th partitioner of every method together)."""

    def __init__(self, partitioners: list[Any] | dict[str, list[Any]] | None = None) -> None:
        super().__init__()
        self._partitioners = partitioners

    @classmethod
    def from_recipe(cls, lowering_recipe: LoweringRecipe | None) -> ToBackendStage:
        return cls() if lowering_recipe is None else cls(partitioners=lowering_recipe.partitioners)

    stage_type = StageType.TO_BACKEND
    valid_predecessor_stages = [StageType.TO_EDGE, StageType.EDGE_PROGRAM_MANAGER_TRANSFORM]
    can_start_pipeline = False

    def run(self, artifact: PipelineArtifact) -> None:
        manager = artifact.data
        if manager is None:
            raise RuntimeError("Edge program manager is not set; run TO_EDGE before TO_BACKEND")
        if self._partitioners:
            with validation_disabled():
                if isinstance(self._partitioners, dict):
                    methods = list(self._partitioners)
                    for round_ in itertools.zip_longest(*self._partitioners.values()):
                        chosen = {m: p for m, p in zip(methods, round_) if p is not None}
                        manager = manager.to_backend(chosen)
                else:
                    for partitioner in self._partitioners:
                        manager = manager.to_backend(partitioner)
        self._artifact = artifact.copy_with_new_data(manager)
        _add_delegation_info_context(self._artifact, manager)


class ExecutorchStage(Stage):
    """``to_executorch`` with the recipe's ExecutorchBackendConfig."""

    def __init__(self, backend_config: Any) -> None:
        super().__init__()
        self._backend_config = backend_config

    stage_type = StageType.TO_EXECUTORCH
    valid_predecessor_stages = [
        StageType.TO_EDGE_TRANSFORM_AND_LOWER,
        StageType.TO_BACKEND,
        StageType.EDGE_PROGRAM_MANAGER_TRANSFORM,
    ]
    can_start_pipeline = False

    def run(self, artifact: PipelineArtifact) -> None:
        if artifact.data is None:
            raise RuntimeError("Edge program manager is not set; run a lowering stage before TO_EXECUTORCH")
        self._artifact = artifact.copy_with_new_data(artifact.data.to_executorch(self._backend_config))
