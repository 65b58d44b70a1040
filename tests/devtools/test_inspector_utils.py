"""The Inspector's building blocks under ExecuTorch's names (``_inspector_utils``): operator graphs of an ETRecord,
debug-handle maps, merging and pairing intermediate outputs, and debug handles carried back to the export graph."""

from __future__ import annotations

import pytest
import torch

from edgetorch.devtools.debug_format.base_schema import OperatorGraph, OperatorNode, ValueNode
from edgetorch.devtools.debug_format.et_schema import FXOperatorGraph
from edgetorch.devtools.inspector import _inspector_utils as u
from edgetorch.exir import to_edge
from edgetorch.exir.debug_handle_utils import DEBUG_HANDLE_KEY, UNSET_DEBUG_HANDLE
from edgetorch.format import etdump as fe


class AddSinAdd(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + 1
        x = x.to(x.dtype)  # a no-op to_edge removes
        return torch.sin(x) + 1


def _exported():
    return torch.export.export(AddSinAdd(), (torch.rand(2, 3),))


def test_find_populated_event_prefers_the_profile_event():
    profile = fe.ProfileEvent(name="op", chain_index=0, instruction_id=3)
    debug = fe.DebugEvent(name="v", chain_index=0, instruction_id=3)
    assert u.find_populated_event(fe.Event(profile_event=profile, debug_event=debug)) is profile
    assert u.find_populated_event(fe.Event(debug_event=debug)) is debug
    with pytest.raises(ValueError, match="neither"):
        u.find_populated_event(fe.Event())


def test_debug_handle_to_op_node_mapping_walks_subgraphs():
    a = OperatorNode("a", metadata={"debug_handle": 1})
    b = OperatorNode("b", [a], metadata={"debug_handle": 2})
    c = OperatorNode("c", [b], metadata={"debug_handle": 1})
    graph = OperatorGraph("g", [ValueNode("x"), a, OperatorGraph("inner", [b, OperatorNode("d"), c])])
    assert u.create_debug_handle_to_op_node_mapping(graph) == {1: [a, c], 2: [b]}


def test_graphs_of_an_etrecord_and_their_handles():
    exported = _exported()
    edge = to_edge(exported).exported_program()

    class Record:  # the two attributes gen_graphs_from_etrecord reads
        graph_map = {"aten/forward": exported}
        edge_dialect_program = {"forward": edge}

    graphs = u.gen_graphs_from_etrecord(Record())
    assert set(graphs) == {"aten/forward", u.EDGE_DIALECT_GRAPH_KEY}
    assert all(isinstance(g, FXOperatorGraph) for g in graphs.values())
    by_handle = u.create_debug_handle_to_op_node_mapping(graphs[u.EDGE_DIALECT_GRAPH_KEY])
    edge_handles = {n.meta[DEBUG_HANDLE_KEY] for n in edge.graph.nodes if n.op == "call_function"}
    assert set(by_handle) == edge_handles and len(edge_handles) == 3
    names = u.get_aot_debug_handle_to_op_name_mapping(edge.graph_module)
    assert sorted(n for ns in names.values() for n in ns) == sorted(
        n.name for n in edge.graph.nodes if n.op == "call_function"
    )
    assert sorted(u.find_op_names(tuple(edge_handles), names)) == sorted(n for ns in names.values() for n in ns)
    assert u.find_op_names((), names) == []


def test_node_filter():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    call = graph.call_function(torch.mul, (x, x))
    item = graph.call_function(torch.relu, (call,), name="getitem_0")
    call.meta["debug_handle"] = item.meta["debug_handle"] = 1
    keep = u.NodeFilter("debug_handle", "call_function", exclude_ops=["getitem"])
    assert keep.matches(call) and not keep.matches(item) and not keep.matches(x)
    assert not u.NodeFilter("other_key", "call_function").matches(call)


def test_merge_overlapping_runtime_handles_keeps_the_latest_instruction():
    big = torch.rand(3)
    merged = u.merge_runtime_overlapping_debug_handles(
        {(4, 5): (1, "a", 1), (5, 6): (2, "b", 1), (9,): (3, "c", 1), (3, 4): (0, big, 1)}
    )
    # (3, 4) ran first: its own handles lead; the value is the one of instruction 2, the last to write
    assert merged == {(3, 4, 5, 6): (2, "b", 1), (9,): (3, "c", 1)}
    assert u.merge_runtime_overlapping_debug_handles({(7,): (1, "x", 1), (7, 7): (2, "y", 1)}) == {(7,): (2, "y", 1)}
    assert u.merge_runtime_overlapping_debug_handles({}) == {}


def test_map_runtime_aot_outputs_pairs_by_handle_from_the_end():
    aot = {(1,): torch.ones(2), (2,): torch.zeros(3), (7,): 5}
    runtime = {(1, 2): ([torch.ones(2), torch.zeros(3)], 2), (9,): (1, 1)}
    pairs = u.map_runtime_aot_intermediate_outputs(aot, runtime)
    assert [(k[0], tuple(v[1].shape)) for k, v in pairs.items()] == [((1, 2), (3,)), ((1, 2), (2,))]
    # one kernel logging several outputs: the one shaped like the AOT output is paired
    mean = torch.zeros(1)
    ((_, paired),) = u.map_runtime_aot_intermediate_outputs(
        {(3,): torch.ones(4)}, {(3,): ([mean, torch.ones(4)], 1)}
    ).values()
    assert paired.shape == (4,)
    ((_, paired),) = u.map_runtime_aot_intermediate_outputs(
        {(3,): torch.ones(4)}, {(3,): ([torch.ones(4), mean], 1)}
    ).values()
    assert paired.shape == (4,)  # not the last output: its shape differs
    with pytest.raises(ValueError, match="one runtime instruction"):
        u.map_runtime_aot_intermediate_outputs({(1,): 1, (2,): 2}, {(1, 2): (1, 1), (2,): (2, 1)})


def test_list_metrics_round_as_executorch_reports_them():
    a = torch.arange(1.0, 17.0).reshape(4, 4)
    b = a.clone()
    b[0, 0] += 0.01
    assert u.calculate_mse([a, 3], [b, 3]) == [0.0, None]
    assert u.calculate_cosine_similarity([a], [b]) == [1.0]
    assert u.calculate_snr([a], [a]) == [float("inf")]
    with pytest.raises(ValueError, match="shape"):
        u.calculate_mse([a], [a.flatten()])


def test_propagate_back_debug_handle_equips_the_exported_graph():
    exported = _exported()
    graph_id = id(exported.graph)
    edge = to_edge(exported).exported_program()
    assert u.propagate_back_debug_handle(exported, graph_id, edge)
    edge_handle = {
        u.get_ancestor_node_identifiers(n)[-1]: n.meta[DEBUG_HANDLE_KEY]
        for n in edge.graph.nodes
        if n.op == "call_function"
    }
    for node in exported.graph.nodes:
        if node.op == "call_function":
            expected = edge_handle.get(f"{node.name}.{graph_id}", UNSET_DEBUG_HANDLE)
            assert node.meta[DEBUG_HANDLE_KEY] == expected
    assert [n.meta[DEBUG_HANDLE_KEY] for n in exported.graph.nodes if n.op == "call_function"].count(
        UNSET_DEBUG_HANDLE
    ) == 2  # the no-op `to` and its dtype assertion, which to_edge removes
    other = _exported()  # a second export: its nodes are not the Edge program's ancestors
    assert not u.propagate_back_debug_handle(other, id(other.graph), edge)
    assert all(DEBUG_HANDLE_KEY not in n.meta for n in other.graph.nodes if n.op == "call_function")
