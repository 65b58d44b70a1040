"""Selective runtimes: operator lists from programs, refusal at load_method, generated minimal kernel modules."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime, UnsupportedOperatorError
from edgetorch.runtime.selective import SelectiveRuntime, kernel_modules, operators_in, write_selective_module

ROOT = pathlib.Path(__file__).resolve().parents[2]


class MatmulRelu(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ y + 1)


class Softmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def lower(model: torch.nn.Module, args: tuple) -> bytes:
    return to_edge(torch.export.export(model, args, strict=False)).to_executorch().buffer


@pytest.fixture(scope="module")
def args() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(3, 4), torch.randn(4, 5)


@pytest.fixture(scope="module")
def pte(args) -> bytes:
    return lower(MatmulRelu(), args)


@pytest.fixture(scope="module")
def softmax_pte() -> bytes:
    return lower(Softmax(), (torch.randn(2, 6),))


def test_operators_in_lists_operators_with_tensor_dtypes(pte):
    ops = operators_in(Runtime.get().load_program(pte))
    assert {"aten::mm.out", "aten::add.out", "aten::relu.out"} <= set(ops)
    assert ops["aten::mm.out"] == {("float32", "float32", "float32")}  # self, mat2, out


def test_selective_runtime_runs_a_program_within_its_list(pte, args):
    ops = operators_in(Runtime.get().load_program(pte))
    runtime = SelectiveRuntime(ops)
    (got,) = runtime.load_program(pte).load_method("forward", seed=0).execute([a.numpy() for a in args])
    np.testing.assert_allclose(got, MatmulRelu()(*args).numpy(), rtol=1e-5, atol=1e-5)
    assert runtime.operator_registry.operator_names == set(ops)


def test_selective_runtime_refuses_an_operator_outside_its_list(pte):
    ops = set(operators_in(Runtime.get().load_program(pte))) - {"aten::relu.out"}
    program = SelectiveRuntime(ops).load_program(pte)
    assert program.method_names == {"forward"}
    with pytest.raises(UnsupportedOperatorError, match=r"'aten::relu.out'.*selective"):
        program.load_method("forward")


def test_kernel_modules_picks_only_the_families_needed():
    modules = kernel_modules(["aten::mm.out", "executorch_prim::add.Scalar", "custom::not_portable.out"])
    assert "edgetorch.runtime.kernels.linalg" in modules
    assert "edgetorch.runtime.kernels.prim" in modules
    assert "edgetorch.runtime.kernels.conv" not in modules


def test_generated_module_loads_only_its_kernels_and_runs(tmp_path, pte, args, softmax_pte):
    """In a fresh interpreter the generated module imports few kernel families, runs its program, refuses others."""
    ops = operators_in(Runtime.get().load_program(pte))
    write_selective_module(tmp_path / "my_selected_ops.py", ops)
    (tmp_path / "model.pte").write_bytes(pte)
    (tmp_path / "softmax.pte").write_bytes(softmax_pte)
    np.save(tmp_path / "x.npy", args[0].numpy())
    np.save(tmp_path / "y.npy", args[1].numpy())
    script = f"""
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
import numpy as np
from my_selected_ops import runtime
from edgetorch.runtime import UnsupportedOperatorError
d = {str(tmp_path)!r}
out = runtime.load_program(d + "/model.pte").load_method("forward").execute([np.load(d + "/x.npy"), np.load(d + "/y.npy")])
np.save(d + "/out.npy", out[0])
try:
    runtime.load_program(d + "/softmax.pte").load_method("forward")
    refused = ""
except UnsupportedOperatorError as e:
    refused = str(e)
families = sorted(m for m in sys.modules if m.startswith("edgetorch.runtime.kernels."))
print(json.dumps({{"refused": refused, "families": families}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), MatmulRelu()(*args).numpy(), rtol=1e-5, atol=1e-5)
    assert "softmax" in report["refused"]
    assert "edgetorch.runtime.kernels.conv" not in report["families"]
    assert "edgetorch.runtime.kernels.quantized" not in report["families"]


class Linear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


@pytest.mark.parametrize("how", ["keyword", "positional"])
def test_selective_load_program_takes_the_same_arguments_as_runtime(tmp_path, how):
    from executorch.exir import ExecutorchBackendConfig as EtConfig
    from executorch.exir import to_edge as et_to_edge

    from edgetorch.runtime import ProgramLoadError, Verification

    model, x = Linear().eval(), torch.randn(2, 4)
    et = et_to_edge(torch.export.export(model, (x,))).to_executorch(EtConfig(external_constants=True))
    et.write_tensor_data_to_file(str(tmp_path))
    (ptd,) = tmp_path.glob("*.ptd")
    runtime = SelectiveRuntime(operators_in(Runtime.get().load_program(et.buffer)))
    with pytest.raises(ProgramLoadError, match="pass the .ptd written with the program"):
        runtime.load_program(et.buffer).load_method("forward")
    if how == "keyword":
        program = runtime.load_program(et.buffer, verification=Verification.InternalConsistency, data_files=[ptd])
    else:
        program = runtime.load_program(et.buffer, Verification.InternalConsistency, [ptd])
    (got,) = program.load_method("forward").execute([x.numpy()])
    np.testing.assert_allclose(got, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
