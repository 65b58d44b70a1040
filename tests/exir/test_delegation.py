"""Backend delegation: to_backend (whole program and partitioned), composition, and running delegates.

PyTorch eager is the numerical oracle; the demo backend's NumPy runtime runs the delegates.
"""

from __future__ import annotations

import operator
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch.export import ExportedProgram, export

from edgetorch.backends.demo.compiler import BLOB_OPS, AddMulPartitionerDemo, BackendWithCompilerDemo
from edgetorch.backends.demo.runtime import OPS, parse
from edgetorch.errors import DelegateLoadError, UnsupportedBackendError
from edgetorch.exir import to_edge
from edgetorch.exir.backend.backend_api import LoweredBackendModule, PartitionerError, to_backend
from edgetorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.delegate import delegate_call_nodes
from edgetorch.exir.backend.partition_utils import (
    TAG,
    PartitionCycleError,
    group_supported_nodes,
    tag_constant_data,
    tag_partitions,
)
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.backend.utils import DelegateMappingBuilder, format_delegated_graph
from edgetorch.exir.dialects._ops import to_aten
from edgetorch.exir.program import edge_manager_to_backend, to_edge_transform_and_lower
from edgetorch.runtime import Runtime

aten = torch.ops.aten


def edge(fn, args: tuple) -> ExportedProgram:
    module = fn if isinstance(fn, torch.nn.Module) else _Wrap(fn)
    return to_edge(export(module, args)).exported_program()


class _Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def run_pte(buffer: bytes, args: tuple) -> list[np.ndarray]:
    method = Runtime.get().load_program(buffer).load_method("forward")
    return method.execute([a.numpy() for a in args])


def assert_matches(got: list[np.ndarray], expected) -> None:
    flat = torch.utils._pytree.tree_leaves(expected)
    assert len(got) == len(flat)
    for g, e in zip(got, flat):
        np.testing.assert_allclose(g, e.detach().numpy(), rtol=1e-5, atol=1e-5)


def chain(a, x, b):
    """The tutorial's f: mm, add, sub, mm, add."""
    y = torch.mm(a, x)
    z = y + b
    a = z - a
    y = torch.mm(a, x)
    return y + b


class Elementwise(torch.nn.Module):
    """Every kind of thing the demo blob holds: inputs, a parameter, a buffer, ops with alpha and scalars."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 3))
        self.register_buffer("scale", torch.tensor([1.5, -2.0, 0.5]))

    def forward(self, x, y):
        h = torch.mm(torch.sin(x), self.w) * self.scale
        h = torch.add(h, torch.cos(y), alpha=2.0) - torch.exp(-y.abs())
        return torch.relu(h) / 3.0, torch.sigmoid(torch.maximum(h, y))


def tags_of(ep: ExportedProgram) -> list:
    return [n.meta.get(TAG) for n in ep.graph.nodes]


# --------------------------------------------------------------------- whole program


def test_lower_whole_program_runs_like_eager():
    torch.manual_seed(0)
    model, args = Elementwise(), (torch.randn(2, 3), torch.randn(2, 3))
    lowered = to_backend("BackendWithCompilerDemo", edge(model, args), [CompileSpec("k", b"v")])
    assert isinstance(lowered, LoweredBackendModule)
    assert lowered.backend_id == "BackendWithCompilerDemo"
    assert lowered.processed_bytes.startswith(b"BackendWithCompilerDemo 1\n")
    assert lowered.compile_specs == [CompileSpec("k", b"v")]
    expected = model(*args)
    torch.testing.assert_close(lowered(*args), expected)
    assert_matches(run_pte(lowered.buffer(), args), expected)
    assert_matches(run_pte(lowered.buffer(extract_delegate_segments=True), args), expected)


def test_debug_handle_map_covers_every_delegated_op():
    ep = edge(Elementwise(), (torch.randn(2, 3), torch.randn(2, 3)))
    lowered = to_backend("BackendWithCompilerDemo", ep, [])
    handles = {n.meta["debug_handle"] for n in ep.graph.nodes if n.op == "call_function"}
    mapped = lowered.meta["debug_handle_map"]
    assert sorted(h for hs in mapped.values() for h in hs) == sorted(handles)


def test_unsupported_op_names_op_and_backend():
    with pytest.raises(RuntimeError, match=r"aten.tan.default.*not supported in backend BackendWithCompilerDemo"):
        to_backend("BackendWithCompilerDemo", edge(torch.tan, (torch.randn(2),)), [])


def test_unknown_backend_id_is_not_found():
    with pytest.raises(NotImplementedError, match="Backend NoSuchBackend was not found"):
        to_backend("NoSuchBackend", edge(torch.sin, (torch.randn(2),)), [])


class NoRuntimeDemo(BackendDetails):
    """A compiler half with no registered runtime half."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        return PreprocessResult(b"opaque")


def test_backend_missing_at_runtime_fails_at_load_method():
    lowered = to_backend("NoRuntimeDemo", edge(torch.sin, (torch.randn(2),)), [])
    program = Runtime.get().load_program(lowered.buffer())
    with pytest.raises(UnsupportedBackendError, match="NoRuntimeDemo"):
        program.load_method("forward")


def test_demo_ops_table_matches_runtime():
    assert set(BLOB_OPS.values()) == set(OPS)


@pytest.mark.parametrize(
    "blob, message",
    [
        (b"nonsense", "no 'data <size>' line"),
        (b"OtherBackend 1\ndata 0\n", "expected 'BackendWithCompilerDemo 1'"),
        (b"BackendWithCompilerDemo 1\nop y float32 tan x\ndata 0\n", "unknown op 'tan'"),
        (b"BackendWithCompilerDemo 1\ninput x float32\nop y float32 add x z\ndata 0\n", r"reads \['z'\]"),
        (b"BackendWithCompilerDemo 1\nconst w float32 [4] 0 16\ndata 8\n12345678", "does not fit"),
        (b"BackendWithCompilerDemo 1\ninput x float32\noutput y\ndata 0\n", "never computed"),
    ],
)
def test_malformed_demo_blob_is_a_load_error(blob, message):
    with pytest.raises(DelegateLoadError, match=message):
        parse(blob)


# --------------------------------------------------------------------- composition


class Composed(torch.nn.Module):
    def __init__(self, lowered):
        super().__init__()
        self.lowerable = lowered
        self.bias = torch.ones(1) * 0.3

    def forward(self, x):
        a = self.lowerable(x)
        b = self.lowerable(a)
        return a, b, a + b + self.bias


def test_lowered_module_composes_into_another_export():
    lowered = to_backend("BackendWithCompilerDemo", edge(torch.sin, (torch.ones(1),)), [])
    model, args = Composed(lowered), (torch.randn(1),)
    manager = to_edge(export(model, args))
    gm = manager.exported_program().graph_module
    calls = delegate_call_nodes(gm)
    assert len(calls) == 2 and all(c.args[0].target == "lowered_module_0" for c in calls)
    assert gm.lowered_module_0.backend_id == "BackendWithCompilerDemo"
    assert gm.lowered_module_0.processed_bytes == lowered.processed_bytes
    assert_matches(run_pte(manager.to_executorch().buffer, args), model(*args))


# --------------------------------------------------------------------- partitioning


def test_add_mul_partitioner_gives_two_delegates_that_run_like_eager():
    args = (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2))
    program = edge(chain, args)
    delegated = to_backend(program, AddMulPartitionerDemo())
    calls = delegate_call_nodes(delegated.graph_module)
    assert len(calls) == 2
    for i in range(2):
        sub = getattr(delegated.graph_module, f"lowered_module_{i}").original_module
        ops = [to_aten(n.target) for n in sub.graph.nodes if n.op == "call_function"]
        assert ops == [aten.mm.default, aten.add.Tensor]
    remaining = [to_aten(n.target) for n in delegated.graph.nodes if n.op == "call_function"]
    assert aten.sub.Tensor in remaining and aten.mm.default not in remaining
    assert all(tag is None for tag in tags_of(delegated))
    assert all(tag is None for tag in tags_of(program)), "the input program must be left untouched"
    torch.testing.assert_close(delegated.module()(*args), chain(*args))
    manager = edge_manager_to_backend(to_edge(export(_Wrap(chain), args)), AddMulPartitionerDemo)
    assert_matches(run_pte(manager.to_executorch().buffer, args), chain(*args))


def interleaved(x, y):
    a = x + y
    s = torch.sin(a)  # undelegated, between the two nodes of the first partition, and reading its first one
    b = a * y
    return s + b  # joins neither: with a and b it would close a cycle through s


def test_a_partition_read_between_its_nodes_leaves_a_graph_in_order():
    args = (torch.randn(2, 2), torch.randn(2, 2))
    delegated = to_backend(edge(interleaved, args), AddMulPartitionerDemo())
    assert len(delegate_call_nodes(delegated.graph_module)) == 2
    delegated.graph.lint()  # every node after what it reads: sin comes after the first delegate's result
    torch.testing.assert_close(delegated.module()(*args), interleaved(*args))
    manager = edge_manager_to_backend(to_edge(export(_Wrap(interleaved), args)), AddMulPartitionerDemo)
    assert_matches(run_pte(manager.to_executorch().buffer, args), interleaved(*args))


class Affine(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 3))
        self.b = torch.nn.Parameter(torch.randn(3))

    def forward(self, x):
        return torch.relu(torch.mm(x, self.w) + self.b) * self.b


def test_delegate_owns_constants_only_it_uses():
    model, args = Affine(), (torch.randn(2, 4),)
    delegated = to_backend(edge(model, args), AddMulPartitionerDemo())
    # w is used only by mm: it moves into the first delegate; b is also used by mul, in a second one.
    assert [s.target for s in delegated.graph_signature.input_specs if s.target] == ["b"]
    assert "w" not in delegated.state_dict
    first = delegated.graph_module.lowered_module_0
    assert b"const " in first.processed_bytes and "w" in first.original_module.state_dict
    manager = edge_manager_to_backend(to_edge(export(model, args)), {"forward": AddMulPartitionerDemo()})
    assert_matches(run_pte(manager.to_executorch().buffer, args), model(*args))


class CopySharedDemo(AddMulPartitionerDemo):
    """The demo partitioner, with shared constants copied into each partition that reads them."""

    def partition(self, exported_program):
        result = super().partition(exported_program)
        tag_constant_data(exported_program, copy_shared=True)
        return result


def test_a_shared_constant_is_copied_into_the_delegate_when_asked():
    model, args = Affine(), (torch.randn(2, 4),)
    delegated = to_backend(edge(model, args), CopySharedDemo())
    # b is read by both delegates (mm + add, then mul): each owns a copy, and the program keeps none.
    assert [s.target for s in delegated.graph_signature.input_specs if s.target] == []
    first, second = delegated.graph_module.lowered_module_0, delegated.graph_module.lowered_module_1
    assert set(first.original_module.state_dict) == {"w", "b"} and set(second.original_module.state_dict) == {"b"}
    assert all(len(call.args) == 2 for call in delegate_call_nodes(delegated.graph_module))  # no constant inputs
    torch.testing.assert_close(delegated.module()(*args), model(*args))
    manager = edge_manager_to_backend(to_edge(export(model, args)), {"forward": CopySharedDemo()})
    assert_matches(run_pte(manager.to_executorch().buffer, args), model(*args))


def test_independent_supported_producers_merge_into_one_partition():
    program = edge(lambda a, b, c, d: torch.mm(a, b) + torch.mm(c, d), tuple(torch.randn(2, 2) for _ in range(4)))
    groups = group_supported_nodes(program.graph_module, lambda n: n.op == "call_function")
    assert [len(g) for g in groups] == [3]


class TagEverything(Partitioner):
    """Tags every mm/add with one tag, across the undelegated sub: an invalid (cyclic) partition."""

    def partition(self, exported_program):
        nodes = [n for n in exported_program.graph.nodes if to_aten(n.target) in (aten.mm.default, aten.add.Tensor)]
        tag_partitions([nodes])
        return PartitionResult(exported_program, {"tag0": DelegationSpec("BackendWithCompilerDemo", [])})


def test_cyclic_tagging_names_the_nodes():
    program = edge(chain, (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2)))
    with pytest.raises(PartitionCycleError, match=r"partition 'tag0'.*aten_sub_tensor.*aten_mm_default_1"):
        to_backend(program, TagEverything())


class Mutating(Partitioner):
    def partition(self, exported_program):
        node = next(n for n in exported_program.graph.nodes if n.op == "call_function")
        node.target = aten.sin.default
        return PartitionResult(exported_program, {})


class Untracked(Partitioner):
    def partition(self, exported_program):
        tag_partitions([[n for n in exported_program.graph.nodes if n.op == "call_function"]], prefix="lost")
        return PartitionResult(exported_program, {})


@pytest.mark.parametrize("partitioner, message", [(Mutating, "changed the graph"), (Untracked, r"\['lost0'\]")])
def test_partitioner_contract_violations(partitioner, message):
    with pytest.raises(PartitionerError, match=message):
        to_backend(edge(chain, (torch.randn(2, 2),) * 3), partitioner())


# --------------------------------------------------------------------- to_edge_transform_and_lower


class KeepLinear(Partitioner):
    """Asks for aten.linear to stay whole (only where the filter allows), and delegates nothing."""

    def __init__(self, accept):
        self.accept = accept

    def partition(self, exported_program):
        return PartitionResult(exported_program, {})

    def ops_to_not_decompose(self, ep):
        return [aten.linear.default], self.accept


@pytest.mark.parametrize("accept, kept", [(None, True), (lambda n: True, True), (lambda n: False, False)])
def test_ops_to_not_decompose_reach_the_partitioner(accept, kept):
    model = torch.nn.Linear(3, 2)
    manager = to_edge_transform_and_lower(export(model, (torch.randn(1, 3),)), partitioner=[KeepLinear(accept)])
    ops = {to_aten(n.target) for n in manager.exported_program().graph.nodes if n.op == "call_function"}
    assert (aten.linear.default in ops) is kept


def test_to_edge_transform_and_lower_delegates_every_method():
    args = (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2))
    programs = {"forward": export(_Wrap(chain), args), "other": export(_Wrap(lambda a, x, b: a * x + b), args)}
    manager = to_edge_transform_and_lower(programs, partitioner=[AddMulPartitionerDemo()])
    counts = {m: len(delegate_call_nodes(manager.exported_program(m).graph_module)) for m in ("forward", "other")}
    assert counts == {"forward": 2, "other": 1}
    program = Runtime.get().load_program(manager.to_executorch().buffer)
    got = program.load_method("other").execute([a.numpy() for a in args])
    assert_matches(got, args[0] * args[1] + args[2])


# --------------------------------------------------------------------- torch-free runtime half


def test_demo_runtime_registers_with_torch_blocked():
    script = textwrap.dedent(
        """
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "executorch"):
                    raise ImportError("blocked for this test: " + name)
        sys.meta_path.insert(0, Block())
        from edgetorch.runtime.backends import registered_backends
        assert "BackendWithCompilerDemo" in registered_backends(), registered_backends()
        assert "torch" not in sys.modules
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]


def test_demo_backend_class_is_found_by_name():
    assert BackendWithCompilerDemo.__name__ == "BackendWithCompilerDemo"


class TagAll(Partitioner):
    """Tags every operator node (not their getitems) for NoRuntimeDemo."""

    def partition(self, exported_program):
        ops = [n for n in exported_program.graph.nodes if n.op == "call_function" and n.target is not operator.getitem]
        tag_partitions([ops])
        return PartitionResult(exported_program, {"tag0": DelegationSpec("NoRuntimeDemo", [])})


def test_getitems_follow_their_multi_output_producer():
    def fn(x):
        values, indices = torch.max(x, dim=1)
        return values + 1, indices

    args = (torch.randn(3, 4),)
    delegated = to_backend(edge(fn, args), TagAll())
    sub = delegated.graph_module.lowered_module_0.original_module
    assert sum(n.op == "call_function" for n in delegated.graph.nodes) == 3  # the call and one getitem per output
    assert operator.getitem in {n.target for n in sub.graph.nodes}
    got, expected = delegated.module()(*args), fn(*args)
    torch.testing.assert_close(got, expected)


class TagGetitemApart(Partitioner):
    """Tags a multi-output op ``tag0`` and one of its getitems, with the node reading it, ``tag1``."""

    def partition(self, exported_program):
        for node in exported_program.graph.nodes:
            if node.op == "call_function":
                node.meta[TAG] = "tag0" if isinstance(node.meta.get("val"), tuple) else "tag1"
        spec = DelegationSpec("NoRuntimeDemo", [])
        return PartitionResult(exported_program, {"tag0": spec, "tag1": spec})


def test_a_getitem_tagged_apart_from_its_producer_goes_with_the_producer():
    def fn(x):
        values, indices = torch.max(x, dim=1)
        return values * indices

    args = (torch.randn(3, 4),)
    delegated = to_backend(edge(fn, args), TagGetitemApart())
    first, second = (getattr(delegated.graph_module, f"lowered_module_{i}").original_module for i in range(2))
    assert operator.getitem in {n.target for n in first.graph.nodes}
    assert operator.getitem not in {n.target for n in second.graph.nodes}  # cut out with the first partition
    torch.testing.assert_close(delegated.module()(*args), fn(*args))


def test_format_delegated_graph_shows_each_delegate_and_its_graph():
    delegated = to_backend(edge(chain, (torch.randn(2, 2),) * 3), AddMulPartitionerDemo())
    text = format_delegated_graph(delegated.graph_module)
    assert text.startswith("graph():\n")
    assert text.count("backend_id: BackendWithCompilerDemo") == 2
    lines = text.splitlines()
    first = lines.index("    backend_id: BackendWithCompilerDemo")
    assert "lowered_module_0" in lines[first - 1] and lines[first + 1] == "    lowered graph():"
    assert any(line.startswith("      %aten_mm_default") for line in lines)


def test_delegate_mapping_builder():
    program = edge(chain, (torch.randn(2, 2),) * 3)
    nodes = [n for n in program.graph.nodes if n.op == "call_function"]
    manual = DelegateMappingBuilder()
    assert manual.insert_delegate_mapping_entry(nodes=nodes[:2], identifier="fused") == "fused"
    assert manual.insert_delegate_mapping_entry(handles=[7, None, 3], identifier=1) == 1
    expected = tuple(sorted(n.meta["debug_handle"] for n in nodes[:2]))
    assert manual.get_delegate_mapping() == {"fused": expected, 1: (3, 7)}
    with pytest.raises(ValueError, match="already inserted"):
        manual.insert_delegate_mapping_entry(handles=1, identifier="fused")
    with pytest.raises(ValueError, match="exactly one"):
        manual.insert_delegate_mapping_entry(identifier=2)
    generated = DelegateMappingBuilder(generated_identifiers=True)
    assert [generated.insert_delegate_mapping_entry(nodes=n) for n in nodes[:3]] == [0, 1, 2]
    with pytest.raises(ValueError, match="numbers identifiers itself"):
        generated.insert_delegate_mapping_entry(handles=1, identifier=5)
