"""``export`` and ``ExportSession``: one call from a model and a recipe to a program, stage by stage.

The default pipeline for an eager model is SOURCE_TRANSFORM (torchao
``quantize_``) -> QUANTIZE (PT2E) -> TORCH_EXPORT -> TO_EDGE_TRANSFORM_AND_LOWER
(-> EDGE_PROGRAM_MANAGER_TRANSFORM) -> TO_EXECUTORCH; a GraphModule skips the
first two, an ExportedProgram the first three. A recipe may name its own
``pipeline_stages`` (e.g. TO_EDGE -> TO_BACKEND); each stage must follow one
it can follow (the stages are :mod:`edgetorch.export.stages`). Every stage's result is kept
(``get_stage_artifacts``). Models,
inputs and dynamic shapes are per method (a dict), or for "forward". Imports
torch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.fx import GraphModule

from edgetorch.errors import InvalidArgumentError
from edgetorch.export.recipe import ExportRecipe, LoweringRecipe, QuantizationRecipe
from edgetorch.export.stages import (
    EdgeProgramManagerTransformStage,
    EdgeTransformAndLowerStage,
    ExecutorchStage,
    PipelineArtifact,
    QuantizeStage,
    SourceTransformStage,
    Stage,
    ToBackendStage,
    ToEdgeStage,
    TorchExportStage,
)
from edgetorch.export.types import StageType

__all__ = ["ExportSession", "PipelineArtifact", "export"]

try:  # optional: the per-operator table prints as a grid when tabulate is installed
    from tabulate import tabulate
except ImportError:
    tabulate = None

logger = logging.getLogger(__name__)
S = StageType


def export(
    model: Any,
    example_inputs: list[tuple] | Mapping[str, list[tuple]] | None = None,
    export_recipe: ExportRecipe | None = None,
    name: str | None = None,
    dynamic_shapes: Any = None,
    constant_methods: Mapping[str, Any] | None = None,
    artifact_dir: str | None = None,
    generate_etrecord: bool = False,
) -> ExportSession:
    """Run ``export_recipe`` on ``model`` and return the finished ``ExportSession``.

    ``model``: an nn.Module, a GraphModule, an ExportedProgram, a dict of them by
    method name, or the path of a saved ExportedProgram. ``example_inputs``: a list
    of input tuples (the first is exported with, all calibrate PT2E quantization),
    or a dict of such lists by method; not needed for an ExportedProgram.
    """
    session = ExportSession(
        model,
        example_inputs,
        export_recipe,
        name=name,
        dynamic_shapes=dynamic_shapes,
        constant_methods=constant_methods,
        artifact_dir=artifact_dir,
        generate_etrecord=generate_etrecord,
    )
    session.export()
    return session


class MissingOutputNameError(InvalidArgumentError, AssertionError):
    """``save_to_pte`` without a file name. Also an AssertionError, which is what ExecuTorch raises there."""


class ExportSession:
    """One model through one recipe's pipeline of stages; the getters return each stage's result.

    The stages are built from the recipe (``_build_stages``); ``register_stage`` replaces one or adds a
    custom one. ``export()`` checks the sequence (each stage must be able to follow the previous one)
    and runs it, keeping every stage's artifact.
    """

    def __init__(
        self,
        model: Any,
        example_inputs: list[tuple] | Mapping[str, list[tuple]] | None = None,
        export_recipe: ExportRecipe | None = None,
        name: str | None = None,
        dynamic_shapes: Any = None,
        constant_methods: Mapping[str, Any] | None = None,
        artifact_dir: str | None = None,
        generate_etrecord: bool = False,
    ) -> None:
        if isinstance(model, str):
            model = torch.export.load(model)
        self._input_model_type = _model_kind(model)
        self._model = dict(model) if isinstance(model, Mapping) else {"forward": model}
        self._example_inputs = _per_method_inputs(example_inputs, self._input_model_type)
        if dynamic_shapes is None:
            self._dynamic_shapes: dict[str, Any] = {}
        else:
            self._dynamic_shapes = (
                dict(dynamic_shapes) if _is_method_dict(dynamic_shapes) else {"forward": dynamic_shapes}
            )
        self._export_recipe = export_recipe if export_recipe is not None else ExportRecipe()
        if not isinstance(self._export_recipe, ExportRecipe):
            raise TypeError(f"export_recipe must be an ExportRecipe; found {type(self._export_recipe).__name__}")
        self._quant_recipe: QuantizationRecipe | None = self._export_recipe.quantization_recipe
        self._lowering_recipe: LoweringRecipe | None = self._export_recipe.lowering_recipe
        self._pipeline_stages = list(self._export_recipe.pipeline_stages or self._get_default_pipeline())
        self._stage_registry: dict[StageType, Stage] = self._build_stages(self._pipeline_stages)
        self._run_context: dict[str, Any] = {
            "example_inputs": self._example_inputs,
            "dynamic_shapes": self._dynamic_shapes,
            "constant_methods": constant_methods,
            "export_recipe": self._export_recipe,
            "session_name": name,
            "artifact_dir": artifact_dir,
            "generate_etrecord": generate_etrecord,
        }
        self._stage_to_artifacts: dict[StageType, PipelineArtifact] = {}

    def _get_default_pipeline(self) -> list[StageType]:
        """SOURCE_TRANSFORM, QUANTIZE (eager models), TORCH_EXPORT (unless exported), TO_EDGE_TRANSFORM_AND_LOWER,
        EDGE_PROGRAM_MANAGER_TRANSFORM (when the recipe has manager passes), TO_EXECUTORCH."""
        stages = [S.SOURCE_TRANSFORM, S.QUANTIZE] if self._input_model_type == "nn.Module" else []
        if self._input_model_type != "ExportedProgram":
            stages.append(S.TORCH_EXPORT)
        stages.append(S.TO_EDGE_TRANSFORM_AND_LOWER)
        if self._lowering_recipe and self._lowering_recipe.edge_manager_transform_passes:
            stages.append(S.EDGE_PROGRAM_MANAGER_TRANSFORM)
        return [*stages, S.TO_EXECUTORCH]

    def _build_stages(self, stages: list[StageType]) -> dict[StageType, Stage]:
        """The recipe's stage for each stage type (a type with no built-in stage is left to register_stage)."""
        recipe, lowering = self._export_recipe, self._lowering_recipe
        builders: dict[StageType, Callable[[], Stage]] = {
            S.SOURCE_TRANSFORM: lambda: SourceTransformStage(
                self._quant_recipe, in_place=recipe.source_transform_in_place
            ),
            S.QUANTIZE: lambda: QuantizeStage(self._quant_recipe),
            S.TORCH_EXPORT: lambda: TorchExportStage(
                list(recipe.aten_transform_passes) if recipe.aten_transform_passes is not None else None,
                strict=recipe.strict,
            ),
            S.TO_EDGE_TRANSFORM_AND_LOWER: lambda: EdgeTransformAndLowerStage.from_recipe(lowering),
            S.TO_EDGE: lambda: ToEdgeStage.from_recipe(lowering),
            S.EDGE_PROGRAM_MANAGER_TRANSFORM: lambda: EdgeProgramManagerTransformStage.from_recipe(lowering),
            S.TO_BACKEND: lambda: ToBackendStage.from_recipe(lowering),
            S.TO_EXECUTORCH: lambda: ExecutorchStage(recipe.executorch_backend_config),
        }
        registry: dict[StageType, Stage] = {}
        for stage_type in stages or self._get_default_pipeline():
            if stage_type in builders:
                registry[stage_type] = builders[stage_type]()
            else:
                logger.info("%s is unknown, register it with session.register_stage()", stage_type)
        return registry

    def register_stage(self, stage_type: StageType, stage: Stage) -> None:
        """Use ``stage`` for ``stage_type`` (replacing the built-in one, or adding a custom step)."""
        self._stage_registry[stage_type] = stage

    def get_registered_stage(self, stage_type: StageType) -> Stage | None:
        return self._stage_registry.get(stage_type)

    def get_all_registered_stages(self) -> dict[StageType, Stage]:
        return self._stage_registry

    def _validate_pipeline_sequence(self, stages: list[StageType]) -> None:
        """Refuse a pipeline that is empty, redoes what the input already is, or chains stages that cannot follow."""
        if not stages:
            raise ValueError("Pipeline stages cannot be empty; give at least one StageType")
        done = {
            "GraphModule": ({S.SOURCE_TRANSFORM, S.QUANTIZE}, "already quantized", "nn.Module"),
            "ExportedProgram": (
                {S.SOURCE_TRANSFORM, S.QUANTIZE, S.TORCH_EXPORT},
                "already exported",
                "nn.Module/GraphModule",
            ),
        }
        if self._input_model_type in done:
            refused, why, instead = done[self._input_model_type]
            found = set(stages) & refused
            if found:
                names = ", ".join(s.name for s in found)
                raise ValueError(
                    f"Cannot run {names} stage(s) with {self._input_model_type} input. {self._input_model_type} is "
                    f"{why}. Remove {names} from pipeline_stages or use {instead} input."
                )
        first = self._stage_registry.get(stages[0])
        if first is None:
            raise ValueError(f"Stage {stages[0]} not found in registry, register it using session.register_stage()")
        if not first.can_start_pipeline:
            raise ValueError(f"Stage {stages[0]} cannot start a pipeline. Begin with a stage that can.")
        for previous, current in zip(stages, stages[1:]):
            stage = self._stage_registry.get(current)
            if stage is None:
                raise ValueError(f"Stage {current} not found in registry, register it using session.register_stage()")
            allowed = stage.valid_predecessor_stages
            if allowed and previous not in allowed:
                raise ValueError(
                    f"Invalid transition from {previous} to {current}. Valid predecessors for {current}: {allowed}"
                )

    def _run_pipeline(self) -> None:
        self._validate_pipeline_sequence(stages=self._pipeline_stages)
        self._stage_to_artifacts.clear()
        artifact = PipelineArtifact(data=self._model, context=self._run_context)
        for stage_type in self._pipeline_stages:
            stage = self._stage_registry.get(stage_type)
            if stage is None:
                raise ValueError(
                    f"Stage {stage_type} not found in registry; register it using session.register_stage()"
                )
            start = time.perf_counter()
            stage.run(artifact)
            artifact = stage.get_artifacts()
            artifact.add_context("duration_ms", int((time.perf_counter() - start) * 1000))
            self._stage_to_artifacts[stage_type] = artifact

    def export(self) -> None:
        """Run the pipeline from the start (a second call starts over)."""
        self._run_pipeline()

    # ----------------------------------------------------------------- results

    def get_stage_artifacts(self) -> dict[StageType, PipelineArtifact]:
        return self._stage_to_artifacts

    def get_exported_program(self, method_name: str = "forward") -> ExportedProgram:
        artifact = self._stage_to_artifacts.get(S.TORCH_EXPORT)
        if artifact is None or artifact.data is None:
            raise RuntimeError(
                f"Exported program is not available. Run Torch Export Stage first (the pipeline ran {self._ran()})."
            )
        if method_name not in artifact.data:
            raise KeyError(
                f"Method name '{method_name}' not found in exported programs. Available methods: {list(artifact.data)}"
            )
        return artifact.data[method_name]

    def get_edge_program_manager(self) -> Any:
        """The EdgeProgramManager of the last Edge stage that ran."""
        for stage in (S.EDGE_PROGRAM_MANAGER_TRANSFORM, S.TO_BACKEND, S.TO_EDGE_TRANSFORM_AND_LOWER, S.TO_EDGE):
            artifact = self._stage_to_artifacts.get(stage)
            if artifact is not None and artifact.data is not None:
                return artifact.data
        raise RuntimeError(
            "Edge program manager is not available. Run one of the edge stages first: TO_EDGE_TRANSFORM_AND_LOWER, "
            f"TO_EDGE, EDGE_PROGRAM_MANAGER_TRANSFORM, or TO_BACKEND (the pipeline ran {self._ran()})."
        )

    def get_executorch_program_manager(self) -> Any:
        artifact = self._stage_to_artifacts.get(S.TO_EXECUTORCH)
        if artifact is None or artifact.data is None:
            raise RuntimeError(
                "Executorch program manager is not initialized. Run Executorch Stage first "
                f"(the pipeline ran {self._ran()}; call export() if it has not run)."
            )
        return artifact.data

    def _ran(self) -> list[str]:
        return [s.value for s in self._stage_to_artifacts]

    def get_executorch_program(self) -> Any:
        return self.get_executorch_program_manager().executorch_program

    def get_pte_buffer(self) -> bytes:
        return self.get_executorch_program_manager().buffer

    def save_to_pte(self, output_name: str) -> None:
        """Write the program to ``output_name`` (``.pte`` added unless given), with any ``.ptd`` files."""
        from edgetorch.extension.export_util.utils import save_pte_program

        if not output_name:
            raise MissingOutputNameError(f"save_to_pte needs a file name, e.g. 'model.pte'; got {output_name!r}")
        save_pte_program(self.get_executorch_program_manager(), output_name)

    def get_example_input(self, method_name: str = "forward") -> tuple:
        if method_name not in self._example_inputs:
            raise KeyError(
                f"Method name '{method_name}' not found in example inputs; have {list(self._example_inputs)}"
            )
        if not self._example_inputs[method_name]:
            raise ValueError(f"Example inputs list for method {method_name} is empty; give at least one input tuple")
        return self._example_inputs[method_name][0]

    def run_method(self, method_name: str = "forward", example_inputs: tuple | None = None) -> list[Any]:
        """Run the program's ``method_name`` in edgetorch's runtime (on its example input by default)."""
        import numpy as np

        from edgetorch.runtime import Runtime

        inputs = self.get_example_input(method_name) if example_inputs is None else example_inputs
        method = Runtime.get().load_program(self.get_pte_buffer()).load_method(method_name)
        values = [x.detach().numpy() if isinstance(x, torch.Tensor) else x for x in inputs]
        return [
            torch.from_numpy(np.ascontiguousarray(o)) if isinstance(o, np.ndarray) else o
            for o in method.execute(values)
        ]

    def print_delegation_info(self) -> None:
        """Print, per method, how many nodes the lowering stage delegated, and the per-operator table."""
        lowering = [s for s in self._pipeline_stages if s in (S.TO_EDGE_TRANSFORM_AND_LOWER, S.TO_BACKEND)]
        if not lowering:
            raise RuntimeError(
                "No delegation info available: the pipeline has no lowering stage (TO_EDGE_TRANSFORM_AND_LOWER "
                "or TO_BACKEND)"
            )
        artifact = self._stage_to_artifacts.get(lowering[0])
        if artifact is None:
            raise RuntimeError("No delegation info available, run the lowering stage first (call export())")
        by_method = artifact.get_context("delegation_info_by_method")
        if by_method:
            infos: list[tuple[str | None, Any]] = sorted(by_method.items())
        else:
            info = artifact.get_context("delegation_info")
            infos = [(None, info)] if info else []
        if not infos:
            print("No delegation info available")
        for method, info in infos:
            if method is not None:
                print(f"Delegation info for method '{method}':")
            print(info.get_summary())
            table = info.get_operator_delegation_dataframe()
            print(tabulate(table, headers="keys", tablefmt="fancy_grid") if tabulate else table.to_string())

    def get_etrecord(self) -> Any:
        return self.get_executorch_program_manager().get_etrecord()


def _model_kind(model: Any) -> str:
    if isinstance(model, Mapping):
        if not model:
            raise ValueError("the model dict is empty; give at least one method, e.g. {'forward': model}")
        return _model_kind(next(iter(model.values())))
    if isinstance(model, ExportedProgram):
        return "ExportedProgram"
    if isinstance(model, GraphModule):
        return "GraphModule"
    if isinstance(model, nn.Module):
        return "nn.Module"
    raise TypeError(
        f"model must be an nn.Module, GraphModule, ExportedProgram, a dict of them, or a path; "
        f"found {type(model).__name__}"
    )


def _is_method_dict(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(v, list | tuple | Mapping) or v is None for v in value.values()
    )


def _per_method_inputs(example_inputs: Any, kind: str) -> dict[str, list[tuple]]:
    if example_inputs is None:
        if kind != "ExportedProgram":
            raise ValueError(
                f"example_inputs are required when model is {kind}; only ExportedProgram inputs can omit "
                "example_inputs. Give a list of input tuples, e.g. [(x,)]"
            )
        return {}
    per_method = dict(example_inputs) if isinstance(example_inputs, Mapping) else {"forward": example_inputs}
    for method, samples in per_method.items():
        if not isinstance(samples, list) or not all(isinstance(s, tuple) for s in samples):
            raise TypeError(
                f"example_inputs of {method!r} must be a list of input tuples, e.g. [(x,)]; "
                f"found {type(samples).__name__}"
            )
    return per_method
