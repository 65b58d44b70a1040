"""``edgetorch.export``: recipes run the whole pipeline (quantize, export, lower, to_executorch) and the programs
they make run in edgetorch's runtime close to eager; the session's getters and errors behave as ExecuTorch's."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn as nn

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.backends.xnnpack.recipes import XNNPACKRecipeProvider, XNNPackRecipeType
from edgetorch.errors import EdgetorchError
from edgetorch.export import ExportRecipe, LoweringRecipe, StageType, export, recipe_registry
from edgetorch.format.pte import load_pte
from edgetorch.runtime import Runtime


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 32)

    def forward(self, x):
        y = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.fc(y)


def delegates(pte: bytes) -> int:
    return sum(len(plan.delegates) for plan in load_pte(pte).program.execution_plan)


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net().eval(), [(torch.randn(1, 3, 8, 8),), (torch.randn(1, 3, 8, 8),)]


def test_fp32_recipe_runs_the_default_pipeline(net):
    model, inputs = net
    recipe = ExportRecipe.get_recipe(XNNPackRecipeType.FP32)
    session = export(model, inputs, export_recipe=recipe, generate_etrecord=True)
    assert list(session.get_stage_artifacts()) == [
        StageType.SOURCE_TRANSFORM,
        StageType.QUANTIZE,
        StageType.TORCH_EXPORT,
        StageType.TO_EDGE_TRANSFORM_AND_LOWER,
        StageType.TO_EXECUTORCH,
    ]
    assert delegates(session.get_pte_buffer()) >= 1
    out = session.run_method("forward")
    torch.testing.assert_close(out[0], model(*inputs[0]), rtol=1e-4, atol=1e-5)
    assert session.get_exported_program().graph_signature is not None
    assert session.get_executorch_program().execution_plan[0].name == "forward"
    assert session.get_etrecord() is not None


@pytest.mark.parametrize(
    ("recipe", "tolerance"),
    [
        (XNNPackRecipeType.PT2E_INT8_DYNAMIC_PER_CHANNEL, 0.05),
        (XNNPackRecipeType.PT2E_INT8_STATIC_PER_CHANNEL, 0.1),
        (XNNPackRecipeType.PT2E_INT8_STATIC_PER_TENSOR, 0.1),
    ],
)
def test_pt2e_recipes_quantize_and_delegate(net, recipe, tolerance):
    model, inputs = net
    session = export(model, inputs, export_recipe=ExportRecipe.get_recipe(recipe))
    graph = session.get_exported_program().graph
    assert any("quantize_per" in str(n.target) for n in graph.nodes)  # the QUANTIZE stage ran
    assert delegates(session.get_pte_buffer()) >= 1
    got = session.run_method(example_inputs=inputs[1])[0]
    expected = model(*inputs[1]).detach()
    assert float((got - expected).abs().max()) <= tolerance * float(expected.abs().max())


def test_torchao_grouped_recipe(net):
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(64, 16)).eval(), torch.randn(2, 64)
    recipe = ExportRecipe.get_recipe(XNNPackRecipeType.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR, group_size=32)
    session = export(model, [(x,)], export_recipe=recipe)
    assert any("dequantize_affine" in str(n.target) for n in session.get_exported_program().graph.nodes)
    assert delegates(session.get_pte_buffer()) == 1
    got, expected = session.run_method()[0], model(x).detach()
    assert float((got - expected).abs().max()) <= 0.15 * float(expected.abs().max())
    with pytest.raises(ValueError, match="group_size"):
        ExportRecipe.get_recipe(XNNPackRecipeType.TORCHAO_INT8_DYNAMIC_ACT_INT4_WEIGHT_PER_TENSOR, group_size="32")


def test_exported_program_input_and_custom_pipeline(net, tmp_path):
    model, inputs = net
    ep = torch.export.export(model, inputs[0])
    recipe = ExportRecipe(
        lowering_recipe=LoweringRecipe(partitioners=[XnnpackPartitioner()]),
        pipeline_stages=[StageType.TO_EDGE, StageType.TO_BACKEND, StageType.TO_EXECUTORCH],
    )
    session = export(ep, export_recipe=recipe)
    assert list(session.get_stage_artifacts()) == recipe.pipeline_stages
    assert delegates(session.get_pte_buffer()) >= 1
    session.save_to_pte(str(tmp_path / "net"))
    method = Runtime.get().load_program((tmp_path / "net.pte").read_bytes()).load_method("forward")
    np.testing.assert_allclose(method.execute([inputs[0][0].numpy()])[0], model(*inputs[0]).detach().numpy(), atol=1e-5)
    with pytest.raises(RuntimeError, match="Run Torch Export Stage first"):
        session.get_exported_program()
    for name in ("", None):  # ExecuTorch asserts; ours is typed and an AssertionError too
        with pytest.raises(AssertionError, match="needs a file name") as e:
            session.save_to_pte(name)
        assert isinstance(e.value, EdgetorchError)


def test_bad_arguments(net):
    model, inputs = net
    with pytest.raises(TypeError, match="list of input tuples"):
        export(model, inputs[0], export_recipe=ExportRecipe())
    with pytest.raises(ValueError, match="example_inputs are required"):
        export(model, None, export_recipe=ExportRecipe())
    with pytest.raises(TypeError, match="model must be"):
        export(42, inputs)
    with pytest.raises(ValueError, match="RecipeType"):
        ExportRecipe.get_recipe("xnnpack_fp32")
    bad = ExportRecipe(pipeline_stages=[StageType.TO_EXECUTORCH])
    with pytest.raises(ValueError, match="to_executorch cannot start a pipeline"):
        export(model, inputs, export_recipe=bad)
    backwards = ExportRecipe(pipeline_stages=[StageType.TORCH_EXPORT, StageType.TO_EXECUTORCH])
    with pytest.raises(ValueError, match="Invalid transition from torch_export to to_executorch"):
        export(model, inputs, export_recipe=backwards)


def test_registry():
    assert "xnnpack" in recipe_registry.list_backends()
    assert set(recipe_registry.get_supported_recipes("xnnpack")) == set(XNNPackRecipeType)
    assert XNNPACKRecipeProvider().create_recipe(StageType.QUANTIZE) is None
    fp32 = recipe_registry.create_recipe(XNNPackRecipeType.FP32, "xnnpack")
    assert fp32.name == "xnnpack_fp32" and fp32.quantization_recipe is None
