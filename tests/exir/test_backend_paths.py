"""ExecuTorch's backend API paths behave as there: preprocess_multimethod, Partitioner(spec), validation_disabled,
get_delegates, tag_mutated_buffer."""

from __future__ import annotations

import torch
from torch.export import export

from edgetorch.backends.demo.compiler import AddMulPartitionerDemo, BackendWithCompilerDemo
from edgetorch.backends.demo.runtime import DemoBackend
from edgetorch.exir import to_edge
from edgetorch.exir.backend.backend_api import to_backend, validation_disabled
from edgetorch.exir.backend.partition_utils import TAG
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.backend.utils import get_delegates, tag_constant_data, tag_mutated_buffer
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.lowered_backend_module import get_lowered_backend_modules, get_lowered_submodules
from edgetorch.runtime import Runtime
from edgetorch.runtime.backends import register_backend

aten = torch.ops.aten


class Chain(torch.nn.Module):
    def forward(self, a, x, b):
        y = torch.mm(a, x) + b
        y = y - a
        return torch.mm(y, x) + b


ARGS = (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2))


class SharingDemo(BackendWithCompilerDemo):
    """The demo backend, seeing all of its partitions at once (and counting what it saw)."""

    seen: list[dict[str, int]] = []

    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        cls.seen.append({method: len(programs) for method, programs in edge_programs.items()})
        return super().preprocess_multimethod(edge_programs, compile_specs)


class SharingPartitioner(AddMulPartitionerDemo):
    def partition(self, exported_program):
        result = super().partition(exported_program)
        spec = DelegationSpec("SharingDemo", [])
        return PartitionResult(result.tagged_exported_program, dict.fromkeys(result.partition_tags, spec))


def test_every_partition_of_every_method_reaches_preprocess_multimethod_in_one_call():
    SharingDemo.seen.clear()
    programs = {"forward": export(Chain(), ARGS), "again": export(Chain(), ARGS)}
    manager = to_edge(programs).to_backend(SharingPartitioner())
    assert SharingDemo.seen == [{"forward": 2, "again": 2}]
    program = manager.exported_program("again")
    modules = get_lowered_backend_modules(program.graph_module)
    assert [m.backend_id for m in modules] == ["SharingDemo", "SharingDemo"]
    assert all(m.processed_bytes for m in modules)
    names = [name for name, _, _ in get_lowered_submodules(program.graph_module)]
    assert names == ["lowered_module_0", "lowered_module_1"]
    assert [n.target for n in get_delegates(program.graph)] == names
    register_backend("SharingDemo", DemoBackend())  # its blobs are the demo backend's
    method = Runtime.get().load_program(manager.to_executorch().buffer).load_method("again")
    torch.testing.assert_close(torch.from_numpy(method.execute([a.numpy() for a in ARGS])[0]), Chain()(*ARGS))


class Mutating(AddMulPartitionerDemo):
    def partition(self, exported_program):
        exported_program.graph_module.meta["touched"] = True
        next(n for n in exported_program.graph.nodes if n.op == "call_function").name = "renamed"
        return super().partition(exported_program)


def test_validation_disabled_lets_a_graph_changing_partitioner_through_and_restores_the_check():
    program = to_edge(export(Chain(), ARGS)).exported_program()
    with validation_disabled():
        lowered = to_backend(program, Mutating())
    assert len(get_delegates(lowered.graph)) == 2
    try:
        to_backend(program, Mutating())
    except RuntimeError as error:
        assert "changed the graph" in str(error)
    else:
        raise AssertionError("the partitioner check is back on after the block")


class Configured(Partitioner):
    def __init__(self, backend: str):
        super().__init__({"backend": backend})

    def partition(self, exported_program):
        return PartitionResult(exported_program, {})


def test_partitioner_keeps_its_spec():
    assert Configured("demo").spec == {"backend": "demo"}
    assert dict(AddMulPartitionerDemo().spec) == {}


class Cache(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(2, 2))
        self.w = torch.nn.Parameter(torch.ones(2, 2))

    def forward(self, x):
        self.total.add_(torch.mm(x, self.w))
        return self.total * 2


def test_tag_mutated_buffer_and_tag_constant_data_give_state_to_the_users_tag():
    program = to_edge(export(Cache(), (torch.randn(2, 2),))).exported_program()
    for node in program.graph.nodes:
        if node.op == "call_function" and to_aten(node.target) in (aten.mm.default, aten.add.Tensor):
            node.meta[TAG] = "tag0"
    tag_constant_data(program)
    tag_mutated_buffer(program)
    tags = {n.name: n.meta.get(TAG) for n in program.graph.nodes if n.op == "placeholder"}
    buffer = next(name for name, fqn in program.graph_signature.inputs_to_buffers.items() if fqn == "total")
    weight = next(iter(program.graph_signature.inputs_to_parameters))
    assert tags[weight] == "tag0"  # a weight only the partition reads
    assert tags[buffer] == "tag0"  # the mutated buffer: tag_constant_data leaves it, tag_mutated_buffer takes it
    assert [tags[name] for name in program.graph_signature.user_inputs] == [None]


class StatefulPartitioner(Partitioner):
    def partition(self, exported_program):
        for node in exported_program.graph.nodes:
            if node.op == "call_function" and to_aten(node.target) in (aten.mm.default, aten.add.Tensor):
                node.meta[TAG] = "tag0"
        tag_constant_data(exported_program)
        tag_mutated_buffer(exported_program)
        return PartitionResult(exported_program, {"tag0": DelegationSpec("BackendWithCompilerDemo", [])})


def test_a_delegate_updating_a_tagged_buffer_keeps_the_state_across_calls():
    x = torch.randn(2, 2)
    manager = to_edge(export(Cache(), (x,))).to_backend(StatefulPartitioner())
    assert len(get_delegates(manager.exported_program().graph)) == 1
    method = Runtime.get().load_program(manager.to_executorch().buffer).load_method("forward")
    eager = Cache()
    for _ in range(3):
        torch.testing.assert_close(torch.from_numpy(method.execute([x.numpy()])[0]), eager(x))
