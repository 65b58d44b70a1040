"""The developer tools' operator graph (``devtools.debug_format.et_schema.FXOperatorGraph``) equals the one
ExecuTorch 1.5.1 builds: the same subgraphs, nodes, names, edges, shapes, dtypes, constants and metadata, for
an edge graph and for the planned graph of ``to_executorch`` (out= buffers folded into their operators)."""

from __future__ import annotations

import pytest
import torch

import edgetorch.exir
from edgetorch.devtools.debug_format.base_schema import OperatorGraph
from edgetorch.devtools.debug_format.et_schema import FXOperatorGraph


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.linear = torch.nn.Linear(16, 5)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = torch.nn.functional.max_pool2d(y, 2)  # a getitem of a tuple-returning op
        y = y.reshape(y.shape[0], 4, 16).sum(1)  # int-list constants
        return self.linear(y) * 0.5, y.max(dim=-1).values


def _shape(graph, handles: bool = True):
    """A graph as nested plain data: every field of every node, inputs by name (debug handles left out of the
    metadata unless ``handles``)."""
    rows = []
    for element in graph.elements:
        if hasattr(element, "elements"):
            rows.append(("graph", element.graph_name, element.metadata, _shape(element, handles)))
            continue
        meta = {k: v for k, v in (element.metadata or {}).items() if handles or k != "debug_handle"}
        rows.append((
            type(element).__name__, element.name, [n.name for n in element.inputs or []], element.output_shapes,
            meta, element.named_args, getattr(element, "dtype", None), getattr(element, "val", None),
            getattr(element, "op", None),
        ))  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def exported():
    torch.manual_seed(0)
    return torch.export.export(Block().eval(), (torch.randn(2, 3, 8, 8),))


@pytest.mark.parametrize("hierarchy", [False, True])
@pytest.mark.parametrize("skip_stack_trace", [True, False])
def test_edge_graph_as_executorch_describes_it(exported, hierarchy, skip_stack_trace):
    from executorch.devtools.debug_format.et_schema import FXOperatorGraph as TheirGraph

    module = edgetorch.exir.to_edge(exported).exported_program().graph_module
    ours = FXOperatorGraph.gen_operator_graph(module, skip_stack_trace, enable_module_hierarchy=hierarchy)
    theirs = TheirGraph.gen_operator_graph(module, skip_stack_trace, enable_module_hierarchy=hierarchy)
    assert isinstance(ours, OperatorGraph)
    assert [g.graph_name for g in ours.elements] == ["inputs", "forward", "outputs"]
    assert _shape(ours) == _shape(theirs)


def test_planned_graph_as_executorch_describes_its_own(exported):
    from executorch.devtools.debug_format.et_schema import FXOperatorGraph as TheirGraph
    from executorch.exir import to_edge as their_to_edge

    ours = edgetorch.exir.to_edge(exported).to_executorch().exported_program().graph_module
    theirs = their_to_edge(exported).to_executorch().exported_program().graph_module
    assert any("alloc" in str(n.target) for n in ours.graph.nodes)
    # ExecuTorch's emitter renumbers the planned graph's debug handles (to instruction order); edgetorch's graph
    # keeps the edge graph's handles, so they are compared apart from the rest.
    ours_graph, their_graph = (
        FXOperatorGraph.gen_operator_graph(ours, True),
        TheirGraph.gen_operator_graph(theirs, True),
    )
    # The compilers name the planned graph's output node differently ("output" / "output_1"): graph naming, not
    # the tool's; the outputs are compared by what they read.
    for graph in (ours_graph, their_graph):
        graph.elements[2].elements[0].name = "output_"
    assert _shape(ours_graph, handles=False) == _shape(their_graph, handles=False)


def test_a_module_call_is_refused_with_what_to_do():
    traced = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.Linear(2, 2)))
    with pytest.raises(ValueError, match="call_module.*after to_edge"):
        FXOperatorGraph.gen_operator_graph(traced)
