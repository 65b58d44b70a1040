"""The records of a model graph for the developer tools: nodes (values and operators) and graphs that group
nodes and other graphs. Plain dataclasses with ExecuTorch's field names, so a viewer written for one reads the
other. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Node:
    """One node: its name, the nodes it reads (``inputs``), the shapes it produces, free-form ``metadata``
    (debug handle, module stack, stack trace) and, for an operator, its schema's argument names."""

    name: str
    inputs: list[Node] | None = None
    output_shapes: list[list[int]] | None = None
    metadata: dict[str, Any] | None = None
    named_args: list[str] | None = None


@dataclass
class OperatorGraph:
    """A named group of nodes and subgraphs (a method, its inputs, its outputs, one module's nodes)."""

    graph_name: str
    elements: list[Node | OperatorGraph]
    metadata: dict[str, Any] | None = None


@dataclass
class ValueNode(Node):
    """A node that is a value, not a computation: an input, a constant, an output. ``dtype`` is the printed
    dtype list of the value; ``val`` a constant's printed value."""

    dtype: str = ""
    val: Any | None = None


@dataclass
class OperatorNode(Node):
    """A node that calls an operator, ``op`` being its name (``aten.add.out``'s ``__name__``)."""

    op: str | None = None
