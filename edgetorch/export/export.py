"""``export`` and ``ExportSession``: one call from a model and a recipe to a program, stage by stage.

The default pipeline for an eager model is SOURCE_TRANSFORM (torchao
``quantize_``) -> QUANTIZE (PT2E) -> TORCH_EXPORT -> TO_EDGE_TRANSFORM_AND_LOWER
(-> EDGE_PROGRAM_MANAGER_TRANSFORM) -> TO_EXECUTORCH; a GraphModule skips the
first two, an ExportedProgram the first three. A recipe may name its own
``pipeline_stages`` (e.g. TO_EDGE -> TO_BACKEND); each stage must follow one
it can follow. Every stage's result is kept (``get_stage_artifacts``). Models,
inputs and dynamic shapes are per method (a dict), or for "forward". Imports
torch.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.fx import GraphModule

from edgetorch.export.recipe import ExportRecipe, LoweringRecipe, QuantizationRecipe
from edgetorch.export.types import StageType

__all__ = ["ExportSession", "PipelineArtifact", "export"]

S = StageType
PREDECESSORS: dict[StageType, tuple[StageType | None, ...]] = {
    S.SOURCE_TRANSFORM: (None,),
    S.QUANTIZE: (None, S.SOURCE_TRANSFORM),
    S.TORCH_EXPORT: (None, S.SOURCE_TRANSFORM, S.QUANTIZE),
    S.TO_EDGE_TRANSFORM_AND_LOWER: (None, S.TORCH_EXPORT),
    S.TO_EDGE: (None, S.TORCH_EXPORT),
    S.TO_BACKEND: (S.TO_EDGE, S.EDGE_PROGRAM_MANAGER_TRANSFORM),
    S.EDGE_PROGRAM_MANAGER_TRANSFORM: (S.TO_EDGE, S.TO_EDGE_TRANSFORM_AND_LOWER, S.TO_BACKEND),
    S.TO_EXECUTORCH: (S.TO_EDGE_TRANSFORM_AND_LOWER, S.TO_BACKEND, S.EDGE_PROGRAM_MANAGER_TRANSFORM, S.TO_EDGE),
}
"""Stage -> the stages it may follow (None: it may start a pipeline)."""


@dataclass
class PipelineArtifact:
    """What a stage produced (models, exported programs, a program manager) and facts about the run."""

    data: Any
    context: dict[str, Any] = field(default_factory=dict)

    def get_context(self, key: str, default: Any = None) -> Any:
        return self.context.get(key, default)

    def add_context(self, key: str, value: Any) -> None:
        self.context[key] = value


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


class ExportSession:
    """One model through one recipe's pipeline; the getters return each stage's result."""

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
        self._kind = _model_kind(model)
        self._model = dict(model) if isinstance(model, Mapping) else {"forward": model}
        self._example_inputs = _per_method_inputs(example_inputs, self._kind)
        if dynamic_shapes is None:
            self._dynamic_shapes: dict[str, Any] = {}
        else:
            self._dynamic_shapes = (
                dict(dynamic_shapes) if _is_method_dict(dynamic_shapes) else {"forward": dynamic_shapes}
            )
        self._recipe = export_recipe if export_recipe is not None else ExportRecipe()
        if not isinstance(self._recipe, ExportRecipe):
            raise TypeError(f"export_recipe must be an ExportRecipe; found {type(self._recipe).__name__}")
        self._quantization = self._recipe.quantization_recipe or QuantizationRecipe()
        self._lowering = self._recipe.lowering_recipe or LoweringRecipe()
        self._stages = list(self._recipe.pipeline_stages or self._default_pipeline())
        self._context: dict[str, Any] = {
            "session_name": name,
            "artifact_dir": artifact_dir,
            "constant_methods": constant_methods,
            "generate_etrecord": generate_etrecord,
        }
        self._artifacts: dict[StageType, PipelineArtifact] = {}

    def _default_pipeline(self) -> list[StageType]:
        stages = [S.SOURCE_TRANSFORM, S.QUANTIZE] if self._kind == "nn.Module" else []
        if self._kind != "ExportedProgram":
            stages.append(S.TORCH_EXPORT)
        stages.append(S.TO_EDGE_TRANSFORM_AND_LOWER)
        if self._lowering.edge_manager_transform_passes:
            stages.append(S.EDGE_PROGRAM_MANAGER_TRANSFORM)
        return [*stages, S.TO_EXECUTORCH]

    def _check_pipeline(self) -> None:
        previous: StageType | None = None
        for stage in self._stages:
            stage = StageType(stage)
            if previous not in PREDECESSORS[stage]:
                allowed = ["(start)" if p is None else p.value for p in PREDECESSORS[stage]]
                found = "the start" if previous is None else previous.value
                raise ValueError(
                    f"stage {stage.value} cannot follow {found}; it can follow {allowed}. Fix the recipe's "
                    f"pipeline_stages"
                )
            previous = stage

    def export(self) -> None:
        """Run the pipeline from the start (a second call starts over)."""
        self._check_pipeline()
        self._artifacts.clear()
        data: Any = self._model
        for stage in self._stages:
            start = time.perf_counter()
            data = STAGES[StageType(stage)](self, data)
            context = {**self._context, "duration_ms": int((time.perf_counter() - start) * 1000)}
            self._artifacts[StageType(stage)] = PipelineArtifact(data, context)

    # ------------------------------------------------------------------ stages

    def _source_transform(self, models: dict[str, nn.Module]) -> dict[str, nn.Module]:
        configs = self._quantization.ao_quantization_configs
        if not configs:
            return models
        if len(configs) > 1:
            raise ValueError(f"source transform takes one torchao config; the recipe has {len(configs)}")
        from torchao.quantization import quantize_

        models = models if self._recipe.source_transform_in_place else copy.deepcopy(models)
        for model in models.values():
            quantize_(model, configs[0].ao_base_config, configs[0].filter_fn)
        return models

    def _quantize(self, models: dict[str, Any]) -> dict[str, Any]:
        recipe = self._quantization
        quantizers = recipe.get_quantizers()
        if not quantizers:
            return models
        from torchao.quantization.pt2e import (
            allow_exported_model_train_eval,
            move_exported_model_to_eval,
            move_exported_model_to_train,
        )
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

        if recipe.is_qat and recipe.train_fn is None:
            raise ValueError("train_fn must be provided when is_qat=True: it trains the prepared module")
        quantizer = quantizers[0]
        if len(quantizers) > 1:
            from torchao.quantization.pt2e.quantizer import ComposableQuantizer

            quantizer = ComposableQuantizer(quantizers)
        converted = {}
        for method, model in models.items():
            inputs = self.get_example_input(method)
            shapes = self._dynamic_shapes.get(method)
            if recipe.dynamic_batch_size:
                # calibration or training batches may differ in size from the example inputs
                batch = torch.export.Dim("batch", min=1)
                shapes = tuple({0: batch} if isinstance(t, torch.Tensor) else None for t in inputs)
            if recipe.is_qat:
                model.train()  # batch norm and dropout are captured with their training behaviour
            captured = torch.export.export(model, inputs, dynamic_shapes=shapes).module()
            captured = _run_graph_passes(captured, recipe.pre_prepare_passes)
            if recipe.is_qat:
                prepared = _run_graph_passes(prepare_qat_pt2e(captured, quantizer), recipe.post_prepare_passes)
                allow_exported_model_train_eval(prepared)
                move_exported_model_to_train(prepared)
                recipe.train_fn(prepared)  # type: ignore[misc]
                move_exported_model_to_eval(prepared)
            else:
                prepared = _run_graph_passes(prepare_pt2e(captured, quantizer), recipe.post_prepare_passes)
                calibration = recipe.calibration_inputs_fn
                for sample in calibration() if calibration else self._example_inputs[method]:
                    prepared(*sample)
            prepared = _run_graph_passes(prepared, recipe.pre_convert_passes)
            converted[method] = _run_graph_passes(convert_pt2e(prepared), recipe.post_convert_passes)
        return converted

    def _torch_export(self, models: dict[str, Any]) -> dict[str, ExportedProgram]:
        programs = {}
        for method, model in models.items():
            program = torch.export.export(
                model,
                self.get_example_input(method),
                dynamic_shapes=self._dynamic_shapes.get(method),
                strict=self._recipe.strict,
            )
            for transform in self._recipe.aten_transform_passes or ():
                program = transform(method, program)
            programs[method] = program
        return programs

    def _to_edge_transform_and_lower(self, programs: dict[str, ExportedProgram]) -> Any:
        from edgetorch.exir import to_edge_transform_and_lower

        return to_edge_transform_and_lower(
            programs,
            transform_passes=self._lowering.edge_transform_passes,
            partitioner=self._lowering.partitioners,
            constant_methods=self._context["constant_methods"],
            compile_config=self._lowering.edge_compile_config,
            generate_etrecord=self._context["generate_etrecord"],
        )

    def _to_edge(self, programs: dict[str, ExportedProgram]) -> Any:
        from edgetorch.exir import to_edge

        return to_edge(
            programs,
            constant_methods=self._context["constant_methods"],
            compile_config=self._lowering.edge_compile_config,
            generate_etrecord=self._context["generate_etrecord"],
        )

    def _to_backend(self, edge: Any) -> Any:
        partitioners = self._lowering.partitioners or []
        if isinstance(partitioners, Mapping):
            raise ValueError("the TO_BACKEND stage takes a list of partitioners, not one list per method")
        for partitioner in partitioners:
            edge = edge.to_backend(partitioner)
        return edge

    def _edge_manager_transform(self, edge: Any) -> Any:
        passes = self._lowering.edge_manager_transform_passes
        return edge.transform(list(passes), compile_config=self._lowering.edge_compile_config) if passes else edge

    def _to_executorch(self, edge: Any) -> Any:
        return edge.to_executorch(self._recipe.executorch_backend_config)

    # ----------------------------------------------------------------- results

    def get_stage_artifacts(self) -> dict[StageType, PipelineArtifact]:
        return self._artifacts

    def _result(self, stages: Sequence[StageType], what: str) -> Any:
        for stage in stages:
            if stage in self._artifacts:
                return self._artifacts[stage].data
        names = " or ".join(s.value for s in stages)
        raise RuntimeError(f"{what} is not available: the pipeline ran no {names} stage (it ran {self._ran()})")

    def _ran(self) -> list[str]:
        return [s.value for s in self._artifacts]

    def get_exported_program(self, method_name: str = "forward") -> ExportedProgram:
        programs = self._result([S.TORCH_EXPORT], "the exported program")
        if method_name not in programs:
            raise KeyError(f"no method {method_name!r}; the exported methods are {list(programs)}")
        return programs[method_name]

    def get_edge_program_manager(self) -> Any:
        stages = [S.EDGE_PROGRAM_MANAGER_TRANSFORM, S.TO_BACKEND, S.TO_EDGE_TRANSFORM_AND_LOWER, S.TO_EDGE]
        return self._result(stages, "the EdgeProgramManager")

    def get_executorch_program_manager(self) -> Any:
        return self._result([S.TO_EXECUTORCH], "the ExecutorchProgramManager")

    def get_executorch_program(self) -> Any:
        return self.get_executorch_program_manager().executorch_program

    def get_pte_buffer(self) -> bytes:
        return self.get_executorch_program_manager().buffer

    def save_to_pte(self, output_name: str) -> None:
        """Write the program to ``output_name`` (``.pte`` added unless given), with any ``.ptd`` files."""
        from edgetorch.extension.export_util.utils import save_pte_program

        if not output_name:
            raise ValueError("save_to_pte needs a file name, e.g. 'model.pte'")
        save_pte_program(self.get_executorch_program_manager(), output_name)

    def get_example_input(self, method_name: str = "forward") -> tuple:
        if method_name not in self._example_inputs:
            raise KeyError(f"no example inputs for method {method_name!r}; have {list(self._example_inputs)}")
        if not self._example_inputs[method_name]:
            raise ValueError(f"the example input list of method {method_name!r} is empty")
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
        """Print, per method, how many nodes went to delegates, and the per-operator table."""
        from edgetorch.devtools.backend_debug import get_delegation_info

        edge = self.get_edge_program_manager()
        for method in sorted(edge.methods):
            info = get_delegation_info(edge.exported_program(method).graph_module)
            print(f"Delegation info for method '{method}':")
            print(info.get_summary())
            print(info.get_operator_delegation_dataframe().to_string())

    def get_etrecord(self) -> Any:
        return self.get_executorch_program_manager().get_etrecord()


STAGES: dict[StageType, Callable[[ExportSession, Any], Any]] = {
    S.SOURCE_TRANSFORM: ExportSession._source_transform,
    S.QUANTIZE: ExportSession._quantize,
    S.TORCH_EXPORT: ExportSession._torch_export,
    S.TO_EDGE_TRANSFORM_AND_LOWER: ExportSession._to_edge_transform_and_lower,
    S.TO_EDGE: ExportSession._to_edge,
    S.TO_BACKEND: ExportSession._to_backend,
    S.EDGE_PROGRAM_MANAGER_TRANSFORM: ExportSession._edge_manager_transform,
    S.TO_EXECUTORCH: ExportSession._to_executorch,
}


def _run_graph_passes(module: GraphModule, passes: Sequence[Callable] | None) -> GraphModule:
    """Each GraphModule -> GraphModule pass in turn; a failing pass is named in the error."""
    for graph_pass in passes or ():
        try:
            module = graph_pass(module)
        except Exception as error:
            raise RuntimeError(f"quantization pass {graph_pass!r} raised {type(error).__name__}: {error}") from error
    return module


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
            raise ValueError(f"example_inputs are needed to export a {kind}: give a list of input tuples, e.g. [(x,)]")
        return {}
    per_method = dict(example_inputs) if isinstance(example_inputs, Mapping) else {"forward": example_inputs}
    for method, samples in per_method.items():
        if not isinstance(samples, list) or not all(isinstance(s, tuple) for s in samples):
            raise TypeError(
                f"example_inputs of {method!r} must be a list of input tuples, e.g. [(x,)]; "
                f"found {type(samples).__name__}"
            )
    return per_method
