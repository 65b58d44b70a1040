"""The "Delegating to a Backend" sections of the Exporting to ExecuTorch tutorial, run as written.

The code is the tutorial's, with ``executorch`` imports replaced by ``edgetorch``
ones (and ``capture_pre_autograd_graph``, gone from torch, taken from
``edgetorch.exir``). The asserts after each section check what its prose
promises, and that every program runs on the edgetorch runtime like eager.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.export import ExportedProgram, export

from edgetorch.exir import EdgeProgramManager, capture_pre_autograd_graph, to_edge
from edgetorch.exir.backend.delegate import delegate_call_nodes
from edgetorch.runtime import Runtime


def run(buffer: bytes, *args: torch.Tensor) -> list[np.ndarray]:
    method = Runtime.get().load_program(buffer).load_method("forward")
    return method.execute([a.numpy() for a in args])


@pytest.fixture(scope="module")
def lowered_module():
    class LowerableModule(torch.nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, x):
            return torch.sin(x)

    # Export and lower the module to Edge Dialect
    example_args = (torch.ones(1),)
    pre_autograd_aten_dialect = capture_pre_autograd_graph(LowerableModule(), example_args)
    aten_dialect: ExportedProgram = export(pre_autograd_aten_dialect, example_args)
    edge_program: EdgeProgramManager = to_edge(aten_dialect)
    to_be_lowered_module = edge_program.exported_program()

    from edgetorch.exir.backend.backend_api import LoweredBackendModule, to_backend

    # Import the backend
    from edgetorch.exir.backend.test.backend_with_compiler_demo import (  # noqa
        BackendWithCompilerDemo,
    )

    # Lower the module
    lowered_module: LoweredBackendModule = to_backend("BackendWithCompilerDemo", to_be_lowered_module, [])
    print(lowered_module)
    print(lowered_module.backend_id)
    print(lowered_module.processed_bytes)
    print(lowered_module.original_module)
    return lowered_module


def test_lowering_the_whole_module(lowered_module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Serialize and save it to a file
    save_path = "delegate.pte"
    with open(save_path, "wb") as f:
        f.write(lowered_module.buffer())

    assert lowered_module.backend_id == "BackendWithCompilerDemo"
    assert isinstance(lowered_module.original_module, ExportedProgram)
    x = torch.tensor([0.25])
    (got,) = run((tmp_path / save_path).read_bytes(), x)
    np.testing.assert_allclose(got, torch.sin(x).numpy(), rtol=1e-6)


def test_compose_the_lowered_module_into_another_module(lowered_module):
    class NotLowerableModule(torch.nn.Module):
        def __init__(self, bias):
            super().__init__()
            self.bias = bias

        def forward(self, a, b):
            return torch.add(torch.add(a, b), self.bias)

    class ComposedModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.non_lowerable = NotLowerableModule(torch.ones(1) * 0.3)
            self.lowerable = lowered_module

        def forward(self, x):
            a = self.lowerable(x)
            b = self.lowerable(a)
            ret = self.non_lowerable(a, b)
            return a, b, ret

    example_args = (torch.ones(1),)
    pre_autograd_aten_dialect = capture_pre_autograd_graph(ComposedModule(), example_args)
    aten_dialect: ExportedProgram = export(pre_autograd_aten_dialect, example_args)
    edge_program: EdgeProgramManager = to_edge(aten_dialect)
    exported_program = edge_program.exported_program()
    print("Edge Dialect graph")
    print(exported_program)
    print("Lowered Module within the graph")
    print(exported_program.graph_module.lowered_module_0.backend_id)
    print(exported_program.graph_module.lowered_module_0.processed_bytes)
    print(exported_program.graph_module.lowered_module_0.original_module)

    assert exported_program.graph_module.lowered_module_0.processed_bytes == lowered_module.processed_bytes
    assert len(delegate_call_nodes(exported_program.graph_module)) == 2
    a = torch.sin(torch.ones(1))
    b = torch.sin(a)
    got = run(edge_program.to_executorch().buffer, torch.ones(1))
    for g, e in zip(got, (a, b, a + b + 0.3)):
        np.testing.assert_allclose(g, e.numpy(), rtol=1e-6)


def f(a, x, b):
    y = torch.mm(a, x)
    z = y + b
    a = z - a
    y = torch.mm(a, x)
    z = y + b
    return z


def test_partition_and_lower_parts_of_a_module():
    example_args = (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2))
    pre_autograd_aten_dialect = capture_pre_autograd_graph(f, example_args)
    aten_dialect: ExportedProgram = export(pre_autograd_aten_dialect, example_args)
    edge_program: EdgeProgramManager = to_edge(aten_dialect)
    exported_program = edge_program.exported_program()
    print("Edge Dialect graph")
    print(exported_program)

    from edgetorch.exir.backend.backend_api import to_backend
    from edgetorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    delegated_program = to_backend(exported_program, AddMulPartitionerDemo)
    print("Delegated program")
    print(delegated_program)
    print(delegated_program.graph_module.lowered_module_0.original_module)
    print(delegated_program.graph_module.lowered_module_1.original_module)

    assert len(delegate_call_nodes(delegated_program.graph_module)) == 2
    torch.testing.assert_close(delegated_program.module()(*example_args), f(*example_args))


def test_edge_program_manager_to_backend():
    from edgetorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    example_args = (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2))
    pre_autograd_aten_dialect = capture_pre_autograd_graph(f, example_args)
    aten_dialect: ExportedProgram = export(pre_autograd_aten_dialect, example_args)
    edge_program: EdgeProgramManager = to_edge(aten_dialect)
    exported_program = edge_program.exported_program()
    delegated_program = edge_program.to_backend(AddMulPartitionerDemo)
    print("Delegated program")
    print(delegated_program.exported_program())

    assert isinstance(delegated_program, EdgeProgramManager)
    assert len(delegate_call_nodes(delegated_program.exported_program().graph_module)) == 2
    assert not delegate_call_nodes(exported_program.graph_module)
    (got,) = run(delegated_program.to_executorch().buffer, *example_args)
    np.testing.assert_allclose(got, f(*example_args).numpy(), rtol=1e-5, atol=1e-5)
