"""The runtime API as ExecuTorch documents it: Runtime, Program, Method, MethodMeta, TensorInfo, Module.

ExecuTorch's own runtime (in a subprocess) says what MethodMeta and method_names must report;
PyTorch eager says what the outputs must be.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from edgetorch.errors import Error, InvalidInputError
from edgetorch.exir import ExecutorchBackendConfig, to_edge
from edgetorch.exir.passes import MemoryPlanningPass
from edgetorch.extension.pybindings import portable_lib
from edgetorch.runtime import Module, Runtime, Verification


class TwoOutputs(torch.nn.Module):
    def forward(self, x, y):
        return x + y, (x * 4).to(torch.int32)


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


def lower(model, args, dynamic_shapes=None, config=None) -> bytes:
    ep = torch.export.export(model.eval(), args, dynamic_shapes=dynamic_shapes)
    return to_edge(ep).to_executorch(config).buffer


def two_methods() -> bytes:
    model = TwoOutputs()
    programs = {
        "forward": torch.export.export(model, (torch.ones(2, 3), torch.ones(2, 3))),
        "other": torch.export.export(Linear().eval(), (torch.ones(4, 3),)),
    }
    return to_edge(programs).to_executorch().buffer


PROGRAMS = {
    "two_outputs": lambda: lower(TwoOutputs(), (torch.ones(2, 3), torch.ones(2, 3))),
    "dynamic": lambda: lower(
        Linear(), (torch.ones(4, 3),), dynamic_shapes=({0: torch.export.Dim("n", min=1, max=16)},)
    ),
    "unplanned_input": lambda: lower(
        Linear(),
        (torch.ones(4, 3),),
        config=ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)),
    ),
    "two_methods": two_methods,
}

# The same script, with only the import of ``Runtime`` changed, runs on ExecuTorch's runtime and on ours.
# ExecuTorch's comes without its compiler package (tests/executorch_worker.py), which saves ~6 s a process.
_IMPORTS = {
    "edgetorch": "from edgetorch.runtime import Runtime",
    "executorch": "from tests.executorch_worker import _import_runtime; Runtime = _import_runtime()",
}
_META_SCRIPT = textwrap.dedent(
    """
    import json, sys
    {import_runtime}
    program = Runtime.get().load_program(sys.argv[1])
    def info(t):
        return {{"sizes": list(t.sizes()), "dtype": t.dtype(), "nbytes": t.nbytes(), "planned": t.is_memory_planned()}}
    meta = {{}}
    for name in program.method_names:
        m = program.metadata(name)
        meta[name] = {{
            "name": m.name(),
            "inputs": [info(m.input_tensor_meta(i)) for i in range(m.num_inputs())],
            "outputs": [info(m.output_tensor_meta(i)) for i in range(m.num_outputs())],
        }}
    print(json.dumps({{"methods": sorted(program.method_names), "meta": meta}}))
    """
)


def _with_this_checkout() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))


def meta_report(package: str, path) -> dict:
    """What ``package``'s runtime reports about a program, run in its own process."""
    done = subprocess.run(
        [sys.executable, "-c", _META_SCRIPT.format(import_runtime=_IMPORTS[package]), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=_with_this_checkout(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_method_meta_and_method_names_match_executorch(tmp_path, name):
    path = tmp_path / f"{name}.pte"
    path.write_bytes(PROGRAMS[name]())
    assert isinstance(Runtime.get().load_program(path).method_names, set)
    assert meta_report("edgetorch", path) == meta_report("executorch", path)


@pytest.mark.parametrize("name", ["two_outputs", "dynamic"])
def test_method_meta_values_work_as_attributes_and_as_calls(name):
    meta = Runtime.get().load_program(PROGRAMS[name]()).metadata("forward")
    assert meta.name == meta.name() == "forward"
    assert meta.num_inputs == meta.num_inputs() and meta.num_outputs == meta.num_outputs()
    for i in range(meta.num_inputs):
        info = meta.input_tensor_meta(i)
        assert info.sizes == info.sizes() and info.nbytes == info.nbytes()
        assert info.numpy_dtype == np.float32 and info.dtype() == 6  # ScalarType Float
    with pytest.raises(IndexError, match="out of range"):
        meta.input_tensor_meta(meta.num_inputs)
    with pytest.raises(IndexError, match="out of range"):
        meta.output_tensor_meta(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_torch_tensors_in_give_torch_tensors_out(dtype):
    class Double(torch.nn.Module):
        def forward(self, x):
            return x + x

    x = (torch.arange(6).reshape(2, 3) - 2).to(dtype)
    method = Runtime.get().load_program(lower(Double(), (x,))).load_method("forward")
    (got,) = method.execute([x.requires_grad_(dtype.is_floating_point)])
    assert isinstance(got, torch.Tensor) and got.dtype == dtype
    torch.testing.assert_close(got, (x + x).detach())


def test_numpy_in_gives_numpy_out():
    x = np.ones((2, 3), np.float32)
    method = Runtime.get().load_program(PROGRAMS["two_outputs"]()).load_method("forward")
    total, scaled = method.execute([x, x])
    assert isinstance(total, np.ndarray) and scaled.dtype == np.int32
    np.testing.assert_array_equal(total, x + x)


def test_registries_answer_as_executorch_runtime():
    runtime = Runtime.get()
    names = runtime.operator_registry.operator_names
    assert isinstance(names, set) and {"aten::add.out", "aten::mm.out"} <= names
    backends = runtime.backend_registry.registered_backend_names
    assert "XnnpackBackend" in backends
    assert runtime.backend_registry.is_available("XnnpackBackend")
    assert not runtime.backend_registry.is_available("NoSuchBackend")
    assert portable_lib._get_registered_backend_names() == backends
    assert set(portable_lib._get_operator_names()) == names


@pytest.fixture(scope="module")
def external(tmp_path_factory):
    """A program whose weights ExecuTorch wrote to a .ptd file next to it, the model and an input."""
    from executorch.exir import ExecutorchBackendConfig as EtConfig
    from executorch.exir import to_edge as et_to_edge

    torch.manual_seed(0)
    model, x = Linear().eval(), torch.randn(4, 3)
    folder = tmp_path_factory.mktemp("external")
    prog = et_to_edge(torch.export.export(model, (x,))).to_executorch(EtConfig(external_constants=True))
    (folder / "model.pte").write_bytes(prog.buffer)
    prog.write_tensor_data_to_file(str(folder))
    (ptd,) = [f for f in os.listdir(folder) if f.endswith(".ptd")]
    return folder / "model.pte", folder / ptd, model, x


@pytest.mark.parametrize(
    "load",
    [
        lambda pte, ptd: Runtime.get().load_program(pte, data_path=ptd).load_method("forward").execute,
        lambda pte, ptd: (
            Runtime.get().load_program(pte.read_bytes(), data_path=ptd.read_bytes()).load_method("forward").execute
        ),
        lambda pte, ptd: Module(pte, ptd).forward,
        lambda pte, ptd: portable_lib._load_for_executorch(str(pte), str(ptd)).forward,
        lambda pte, ptd: portable_lib._load_for_executorch_from_buffer(pte.read_bytes(), ptd.read_bytes()).forward,
    ],
    ids=["load_program", "load_program_bytes", "Module", "_load_for_executorch", "_from_buffer"],
)
def test_data_path_supplies_external_weights(external, load):
    pte, ptd, model, x = external
    (got,) = load(pte, ptd)([x])
    torch.testing.assert_close(got, model(x).detach())


def test_module_refuses_verification_as_its_second_argument(external):
    pte, *_ = external
    with pytest.raises(TypeError, match="data_path"):
        Module(pte, Verification.Minimal)


def test_module_loads_lazily_and_runs_staged_inputs():
    x, y = np.full((2, 3), 2, np.float32), np.ones((2, 3), np.float32)
    module = Module(two_methods())
    assert not module.is_loaded()
    assert module.method_names() == {"forward", "other"} and module.num_methods() == 2
    assert module.is_loaded() and not module.is_method_loaded("forward")
    np.testing.assert_array_equal(module.forward([x, y])[0], x + y)  # ExecuTorch's form
    np.testing.assert_array_equal(module.forward(x, y)[0], x + y)
    np.testing.assert_array_equal(module(x, y)[0], x + y)
    assert module.is_method_loaded("forward")
    module.set_input(x, 0)
    with pytest.raises(InvalidInputError, match=r"unset inputs \[1\]"):
        module.forward()
    module.set_input("forward", y, 1)
    np.testing.assert_array_equal(module.execute("forward")[0], x + y)
    module.set_inputs([y, y])
    np.testing.assert_array_equal(module.forward()[0], y + y)
    with pytest.raises(InvalidInputError, match="takes 2 inputs"):
        module.set_inputs("forward", [x])
    with pytest.raises(IndexError):
        module.set_input(x, 2)
    assert module.run_method("other", [np.ones((4, 3), np.float32)])[0].shape == (4, 2)
    assert module.method_meta("other").input_tensor_meta(0).sizes() == (4, 3)
    assert module.unload_method("forward") and not module.is_method_loaded("forward")
    assert not module.unload_method("forward")


def test_partial_staging_then_forward_takes_the_later_staged_inputs():
    x, y = np.full((2, 3), 2, np.float32), np.ones((2, 3), np.float32)
    module = Module(two_methods())
    module.set_input(y, 1)
    np.testing.assert_array_equal(module.forward(x)[0], x + y)
    np.testing.assert_array_equal(module.forward([y])[0], y + y)  # y still staged at index 1
    module.set_input(None, 1)  # unstaged
    with pytest.raises(InvalidInputError, match=r"unset inputs \[1\]"):
        module.forward(x)


def _unplanned_outputs() -> bytes:
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_output=False))
    return lower(TwoOutputs(), (torch.ones(2, 3), torch.ones(2, 3)), config=config)


def test_set_output_writes_every_run_into_the_callers_buffer():
    x, y = np.full((2, 3), 2, np.float32), np.ones((2, 3), np.float32)
    module = Module(_unplanned_outputs())
    assert not module.method_meta().output_tensor_meta(0).is_memory_planned()
    total = np.zeros((2, 3), np.float32)
    module.set_output(total)
    got = module.forward(x, y)
    assert got[0] is total
    np.testing.assert_array_equal(total, x + y)
    module.forward(y, y)
    np.testing.assert_array_equal(total, y + y)  # the buffer persists across runs
    scaled = torch.zeros(2, 3, dtype=torch.int32)
    module.set_output("forward", scaled, 1)
    assert module.forward(torch.from_numpy(x), torch.from_numpy(y))[1] is scaled
    torch.testing.assert_close(scaled, torch.full((2, 3), 8, dtype=torch.int32))
    assert module.get_output(1) is scaled
    module.set_outputs([np.zeros((2, 3), np.float32), np.zeros((2, 3), np.int32)])

    with pytest.raises(InvalidInputError, match=r"is int32 \[2, 3\]; the buffer given is float32") as e:
        module.set_output(np.zeros((2, 3), np.float32), 1)
    assert e.value.code == Error.InvalidArgument
    with pytest.raises(IndexError):
        module.set_output(total, 2)
    with pytest.raises(InvalidInputError, match="has 2 outputs, got 1"):
        module.set_outputs([total])
    planned = Module(two_methods())
    with pytest.raises(InvalidInputError, match="memory-planned") as e:
        planned.set_output(total)
    assert e.value.code == Error.InvalidState


def test_portable_lib_runs_with_torch_blocked(tmp_path):
    from tests.runtime.test_torch_free import BLOCKER

    (tmp_path / "m.pte").write_bytes(PROGRAMS["two_outputs"]())
    script = BLOCKER + textwrap.dedent(
        f"""
        import numpy as np
        from edgetorch.extension.pybindings import portable_lib
        module = portable_lib._load_for_executorch({str(tmp_path / "m.pte")!r})
        total, scaled = module.forward([np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])
        assert total.tolist() == [[2.0] * 3] * 2 and scaled.dtype == np.int32
        assert "XnnpackBackend" in portable_lib._get_registered_backend_names()
        assert not any(m.split(".")[0] in ("torch", "executorch") for m in sys.modules), "torch was imported"
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=_with_this_checkout()
    )
    assert done.returncode == 0, done.stderr[-3000:]
