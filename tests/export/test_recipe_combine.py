"""``ExportRecipe.combine``, the QUANTIZE stage's passes and QAT hook, and the recipe registry, as ExecuTorch's."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
    XNNPACKQuantizer,
    get_symmetric_quantization_config,
)
from edgetorch.backends.xnnpack.recipes import XNNPackRecipeType
from edgetorch.exir import EdgeCompileConfig
from edgetorch.export import ExportRecipe, LoweringRecipe, Mode, QuantizationRecipe, export, recipe_registry
from edgetorch.export.recipe_registry import RecipeRegistry


def test_combine_joins_lists_in_order_and_keeps_agreeing_settings():
    first, second = XnnpackPartitioner(), XnnpackPartitioner()
    calls: list[str] = []
    a = ExportRecipe(
        name="a",
        lowering_recipe=LoweringRecipe(partitioners=[first], edge_compile_config=EdgeCompileConfig()),
        quantization_recipe=QuantizationRecipe(quantizers=["qa"], calibration_inputs_fn=lambda: [(1,)]),
    )
    b = ExportRecipe(
        name="b",
        lowering_recipe=LoweringRecipe(partitioners=[second], edge_compile_config=EdgeCompileConfig()),
        quantization_recipe=QuantizationRecipe(
            quantizers=["qb"], calibration_inputs_fn=lambda: [(2,), (3,)], post_convert_passes=[calls.append]
        ),
    )
    combined = ExportRecipe.combine([a, b])
    assert combined.name == "a_b"
    assert combined.lowering_recipe.partitioners == [first, second]
    assert combined.quantization_recipe.quantizers == ["qa", "qb"]
    assert list(combined.quantization_recipe.calibration_inputs_fn()) == [(1,), (2,), (3,)]
    assert combined.quantization_recipe.post_convert_passes == [calls.append]
    assert ExportRecipe.combine([a]) is a
    assert ExportRecipe.combine([a, b], recipe_name="both").name == "both"
    assert ExportRecipe.combine([ExportRecipe(), ExportRecipe()]).lowering_recipe is None


@pytest.mark.parametrize(
    "left, right, field",
    [
        (ExportRecipe(strict=True), ExportRecipe(strict=False), "strict"),
        (ExportRecipe(mode=Mode.DEBUG), ExportRecipe(mode=Mode.RELEASE), "mode"),
        (ExportRecipe(source_transform_in_place=True), ExportRecipe(), "source_transform_in_place"),
        (
            ExportRecipe(quantization_recipe=QuantizationRecipe(quantizers=["q"], is_qat=True)),
            ExportRecipe(quantization_recipe=QuantizationRecipe(quantizers=["q"])),
            "is_qat",
        ),
        (
            ExportRecipe(quantization_recipe=QuantizationRecipe(train_fn=print)),
            ExportRecipe(quantization_recipe=QuantizationRecipe(train_fn=print)),
            "train_fn",
        ),
        (
            ExportRecipe(lowering_recipe=LoweringRecipe(partitioners={"forward": []})),
            ExportRecipe(lowering_recipe=LoweringRecipe(partitioners=[XnnpackPartitioner()])),
            "list-valued and dict-valued",
        ),
    ],
)
def test_combine_refuses_settings_that_disagree(left, right, field):
    with pytest.raises(ValueError, match=field):
        ExportRecipe.combine([left, right])
    with pytest.raises(ValueError, match="cannot be empty"):
        ExportRecipe.combine([])


def test_combine_names_the_edge_config_fields_that_disagree():
    keep = EdgeCompileConfig(preserve_ops=[torch.ops.aten.linear.default])
    a = ExportRecipe(name="a", lowering_recipe=LoweringRecipe(edge_compile_config=keep))
    b = ExportRecipe(name="b", lowering_recipe=LoweringRecipe(edge_compile_config=EdgeCompileConfig()))
    with pytest.raises(ValueError, match=r"preserve_ops \(a=\['aten.linear.default'\], b=\[\]\)"):
        ExportRecipe.combine([a, b])
    same = ExportRecipe(name="c", lowering_recipe=LoweringRecipe(edge_compile_config=EdgeCompileConfig()))
    assert ExportRecipe.combine([b, same]).lowering_recipe.edge_compile_config is not None


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_quantize_stage_runs_the_recipe_passes_in_order_and_trains_with_qat():
    seen: list[str] = []

    def mark(name):
        def graph_pass(module):
            seen.append(name)
            return module

        return graph_pass

    def train(module):
        seen.append("train")
        module(torch.randn(5, 4))  # dynamic_batch_size: a batch the example inputs never had

    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_qat=True))
    recipe = ExportRecipe(
        quantization_recipe=QuantizationRecipe(
            quantizers=[quantizer],
            is_qat=True,
            dynamic_batch_size=True,
            train_fn=train,
            pre_prepare_passes=[mark("pre_prepare")],
            post_prepare_passes=[mark("post_prepare")],
            pre_convert_passes=[mark("pre_convert")],
            post_convert_passes=[mark("post_convert")],
        )
    )
    session = export(Mlp(), [(torch.randn(2, 4),)], recipe)
    assert seen == ["pre_prepare", "post_prepare", "train", "pre_convert", "post_convert"]
    assert len(session.get_pte_buffer()) > 0
    no_train = ExportRecipe(quantization_recipe=QuantizationRecipe(quantizers=[quantizer], is_qat=True))
    with pytest.raises(ValueError, match="train_fn must be provided"):
        export(Mlp(), [(torch.randn(2, 4),)], no_train)


def test_the_recipe_registry_is_one_object_and_names_missing_backends():
    assert RecipeRegistry() is recipe_registry
    assert "xnnpack" in recipe_registry.list_backends()
    with pytest.raises(ValueError, match="Backend 'nope' not available"):
        recipe_registry.get_supported_recipes("nope")
    with pytest.raises(ValueError, match="Backend 'nope' not available"):
        recipe_registry.create_recipe(XNNPackRecipeType.FP32, "nope")
    with pytest.raises(ValueError, match="Invalid recipe type"):
        ExportRecipe.get_recipe("fp32")


def test_session_runs_a_registered_stage_and_prints_the_lowering_stages_delegation(capsys):
    from edgetorch.export import ExportSession, StageType
    from edgetorch.export.stages import PipelineArtifact, Stage

    class Double(Stage):
        """A custom step between lowering and to_executorch: records that it saw the manager."""

        stage_type = StageType.EDGE_PROGRAM_MANAGER_TRANSFORM
        valid_predecessor_stages = [StageType.TO_EDGE_TRANSFORM_AND_LOWER]
        can_start_pipeline = False

        def run(self, artifact: PipelineArtifact) -> None:
            self._artifact = artifact.copy_with_new_data(artifact.data)
            self._artifact.add_context("seen_methods", sorted(artifact.data.methods))

    program = torch.export.export(Mlp(), (torch.randn(2, 4),))
    recipe = ExportRecipe(
        lowering_recipe=LoweringRecipe(partitioners=[XnnpackPartitioner()]),
        pipeline_stages=[
            StageType.TO_EDGE_TRANSFORM_AND_LOWER,
            StageType.EDGE_PROGRAM_MANAGER_TRANSFORM,
            StageType.TO_EXECUTORCH,
        ],
    )
    session = ExportSession(program, export_recipe=recipe)
    session.register_stage(StageType.EDGE_PROGRAM_MANAGER_TRANSFORM, Double())
    session.export()
    artifacts = session.get_stage_artifacts()
    assert artifacts[StageType.EDGE_PROGRAM_MANAGER_TRANSFORM].get_context("seen_methods") == ["forward"]
    assert artifacts[StageType.TO_EXECUTORCH].get_context("duration_ms") >= 0
    lowering = session.get_registered_stage(StageType.TO_EDGE_TRANSFORM_AND_LOWER)
    assert lowering.delegation_info.num_delegated_subgraphs == 1
    session.print_delegation_info()
    printed = capsys.readouterr().out
    assert "Delegation info for method 'forward':" in printed and "linear" in printed
