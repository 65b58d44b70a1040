"""An FX graph module (an edge or ExecuTorch program's graph) as the developer tools' operator graph: the
inputs, the operator calls with their constant arguments as value nodes, and the outputs, each node carrying
its debug handle, module stack and (optionally) stack trace; with ``enable_module_hierarchy`` the nodes of each
source module are grouped into a subgraph of their own. Imports torch."""

from __future__ import annotations

import operator
import warnings
from collections import defaultdict
from enum import Enum
from typing import Any

import torch
from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

from edgetorch.devtools.debug_format.base_schema import Node, OperatorGraph, OperatorNode, ValueNode
from edgetorch.exir.memory import alloc

__all__ = ["FXOperatorGraph", "Node", "OperatorGraph", "OperatorNode", "RESERVED_METADATA_ARG", "ValueNode"]


class RESERVED_METADATA_ARG(Enum):
    """The metadata keys (and profiling table names) the developer tools give a meaning to."""

    DEBUG_HANDLE = "debug_handle"
    MODULE_STACK = "nn_module_stack"
    SOURCE_FN_STACK = "source_fn_stack"
    MODULE_TYPE = "module_type"
    PROFILE_START_TIME = "profile_start_time"
    PROFILE_END_TIME = "profile_end_time"
    LOAD_START_TIME = "load_start_time"
    LOAD_END_TIME = "load_end_time"
    MEMORY_USAGE = "memory_usage"
    DEBUG_ENTRY = "debug_entry"
    STACK_TRACE = "stack_trace"
    DEBUG_DATA = "debug_data"

    METRICS_KEYWORD = "metrics"
    PROFILE_SUMMARY_COLDSTART = "Coldstart"
    PROFILE_SUMMARY_AVERAGE = "Average"
    PROFILE_SUMMARY_P90 = "P90"
    PROFILE_SUMMARY_P10 = "P10"
    PROFILE_SUMMARY_MIN = "Min"
    PROFILE_SUMMARY_MAX = "Max"

    AGGREGATED_OP_TABLE = "Aggregated op stats"
    RUN_SUMMARY_INDIVIDUAL_RUNS_TABLE = "Run summary individual stats"
    RUN_SUMMARY_TABLE = "Aggregated run summary stats"
    OP_INSTANCE_SUMMARY_TABLE = "Individual op stats"

    TABLES_KEYWORD = "tables"
    KV_KEYWORD = "kv"
    MODEL_LOAD_TIME_KEY = "Model load time (ms)"


_KEPT_METADATA = (
    RESERVED_METADATA_ARG.DEBUG_HANDLE,
    RESERVED_METADATA_ARG.STACK_TRACE,
    RESERVED_METADATA_ARG.MODULE_STACK,
)


class FXOperatorGraph(OperatorGraph):
    """An operator graph made from an FX graph module by :meth:`gen_operator_graph`."""

    @staticmethod
    def _get_node_name(node: torch.fx.Node) -> str:
        """The graph name of ``node``: a ``getitem`` stands for the node it indexes. The trailing ``_`` keeps
        viewers such as TensorBoard from merging nodes whose names differ only in a final number."""
        if node.target is operator.getitem:
            source = node.args[0]
            if not isinstance(source, torch.fx.Node):
                raise TypeError(
                    f"getitem node {node.name!r}: expected an FX node as its first argument, got {source!r}"
                )
            node = source
        return node.name + "_"

    @staticmethod
    def _get_op_name(node: torch.fx.Node) -> str:
        return str(getattr(node.target, "__name__", node.target))

    @staticmethod
    def _extract_metadata(metadata: dict[str, Any], skip_stack_trace: bool | None = False) -> dict[str, Any]:
        """The node metadata the tools use: debug handle, stack trace (unless skipped), module stack."""
        keys = [k.value for k in _KEPT_METADATA if not (skip_stack_trace and k is RESERVED_METADATA_ARG.STACK_TRACE)]
        return {key: metadata[key] for key in keys if key in metadata}

    @staticmethod
    def _extract_output_shapes(val: Any) -> list[list[int]] | None:
        tensors = _tensors(val)
        return None if tensors is None else [list(t.shape) for t in tensors]

    @staticmethod
    def _extract_output_dtype(val: Any) -> list[torch.dtype] | None:
        tensors = _tensors(val)
        return None if tensors is None else [t.dtype for t in tensors]

    @staticmethod
    def gen_operator_graph(
        model: torch.fx.GraphModule, skip_stack_trace: bool | None = False, enable_module_hierarchy: bool = False
    ) -> FXOperatorGraph:
        """``model``'s graph as a ``base`` graph of three subgraphs: ``inputs``, ``forward`` (the operator calls
        and constants, and with ``enable_module_hierarchy`` one subgraph per source module) and ``outputs``."""
        return _Builder(bool(skip_stack_trace), enable_module_hierarchy).build(model.graph)


def _is_alloc(node: torch.fx.Node) -> bool:
    """Whether ``node`` allocates a planned buffer (``exir.memory.alloc``, ours or ExecuTorch's: a graph module
    ExecuTorch wrote is read the same way)."""
    target = node.target
    return target is alloc or (
        getattr(target, "__name__", None) == "alloc" and str(getattr(target, "__module__", "")).endswith("exir.memory")
    )


def _tensors(val: Any) -> list[torch.Tensor] | None:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, tuple) and all(isinstance(t, torch.Tensor) for t in val):
        return list(val)
    return None


class _Builder:
    """One pass over an FX graph collecting nodes by name, then the three subgraphs."""

    def __init__(self, skip_stack_trace: bool, modules: bool) -> None:
        self.skip_stack_trace = skip_stack_trace
        self.modules = modules
        self.nodes: dict[str, Node] = {}
        self.inputs: dict[str, Node] = {}
        self.outputs: dict[str, Node] = {}
        self.out_buffers: set[str] = set()  # planned out= buffers, named after the operator that fills them
        self.groups: defaultdict[tuple[str, str], list[Node]] = defaultdict(list)
        self.constants = 0

    def build(self, graph: torch.fx.Graph) -> FXOperatorGraph:
        for fx_node in graph.nodes:
            if _is_alloc(fx_node) or fx_node.target is operator.getitem:
                continue
            name = FXOperatorGraph._get_node_name(fx_node)
            self.nodes[name] = self._node(fx_node, name)
        return self._compose()

    def _node(self, fx_node: torch.fx.Node, name: str) -> Node:
        meta = FXOperatorGraph._extract_metadata(fx_node.meta, self.skip_stack_trace)
        val = fx_node.meta.get("val")
        shapes = FXOperatorGraph._extract_output_shapes(val)
        dtype = str(FXOperatorGraph._extract_output_dtype(val) or "")
        if fx_node.op in ("placeholder", "get_attr"):
            node: Node = ValueNode(name, output_shapes=shapes, metadata=meta, dtype=dtype)
            if fx_node.op == "placeholder":
                self.inputs[name] = node
            return node
        if fx_node.op == "output":
            (returned,) = fx_node.args
            reads = [self.nodes[FXOperatorGraph._get_node_name(r)] for r in returned if r is not None]
            node = self.outputs[name] = ValueNode(name, inputs=reads, output_shapes=shapes, metadata=meta, dtype=dtype)
            return node
        if fx_node.op != "call_function":
            raise ValueError(
                f"node {fx_node.name!r} is a {fx_node.op}: expected the calls of an edge or ExecuTorch graph "
                "(call_function only); give the graph module after to_edge()"
            )
        schema = getattr(fx_node.target, "_schema", None)
        node = OperatorNode(
            name,
            inputs=self._arguments(fx_node, schema),
            output_shapes=shapes,
            metadata=meta,
            op=FXOperatorGraph._get_op_name(fx_node),
            named_args=[a.name for a in schema.arguments] if schema is not None else [],
        )
        self._group(node, fx_node)
        out = fx_node.kwargs.get("out")
        if isinstance(out, torch.fx.Node) and _is_alloc(out):
            buffer = FXOperatorGraph._get_node_name(out)
            self.nodes[buffer] = node
            self.out_buffers.add(buffer)
        return node

    def _arguments(self, fx_node: torch.fx.Node, schema: Any) -> list[Node]:
        """The nodes ``fx_node`` reads: graph values by name, constants as new value nodes named after their
        schema argument (``CONST_n`` without a schema)."""
        functionalized = fx_node.target in (auto_functionalized, auto_functionalized_v2)
        args = tuple(fx_node.kwargs.values()) if functionalized else fx_node.args
        names = [a.name for a in schema.arguments] if schema is not None else []
        reads: list[Node] = []
        for index, arg in enumerate(args):
            label = names[index] if index < len(names) else "CONST"
            if isinstance(arg, torch.fx.Node):
                if not _is_alloc(arg):
                    reads.append(self.nodes[FXOperatorGraph._get_node_name(arg)])
            elif isinstance(arg, (int, float, torch.dtype, str)):
                reads.append(self._constant(label, str(arg), fx_node))
            elif isinstance(arg, list):
                reads.extend(self._list_argument(label, arg, fx_node))
            elif arg is not None:
                raise TypeError(
                    f"node {fx_node.name!r}: argument {index} is a {type(arg).__name__} ({arg!r}); expected a node, "
                    "a number, a dtype, a string, a list of these, or None"
                )
        if not functionalized:
            for key, value in fx_node.kwargs.items():
                if not (isinstance(value, torch.fx.Node) and _is_alloc(value)):
                    warnings.warn(f"node {fx_node.name!r}: keyword argument {key!r} is not shown", stacklevel=2)
        return reads

    def _list_argument(self, label: str, arg: list, fx_node: torch.fx.Node) -> list[Node]:
        """A list argument: a list of numbers is one constant; nodes are read by name; a None is a constant."""
        reads: list[Node] = []
        for item in arg:
            if isinstance(item, (int, float)):
                return [self._constant(label, arg, fx_node)]
            if isinstance(item, torch.fx.Node):
                reads.append(self.nodes[FXOperatorGraph._get_node_name(item)])
            elif item is None:
                reads.append(self._constant("CONST_NONE", str(arg), fx_node, joined=False))
            else:
                raise TypeError(
                    f"node {fx_node.name!r}: a list argument holds a {type(item).__name__} ({item!r}); expected "
                    "numbers, nodes or None"
                )
        return reads

    def _constant(self, label: str, val: Any, fx_node: torch.fx.Node, joined: bool = True) -> Node:
        name = f"{label}{'_' if joined else ''}{self.constants}"
        self.constants += 1
        node = self.nodes[name] = ValueNode(name, val=val)
        self._group(node, fx_node)
        return node

    def _group(self, node: Node, fx_node: torch.fx.Node) -> None:
        """With module hierarchy on, file ``node`` under the source module ``fx_node`` came from."""
        source = fx_node.meta.get("source_fn_stack")
        if not self.modules or source is None or "nn_module_stack" not in fx_node.meta:
            return
        module, kind = source[-1][0], source[-1][1]
        self.groups[(module, kind if isinstance(kind, str) else kind.__name__)].append(node)

    def _compose(self) -> FXOperatorGraph:
        modules: list[Node | OperatorGraph] = []
        for (module, kind), members in self.groups.items():
            modules.append(OperatorGraph(graph_name=module, elements=list(members), metadata={"module_type": kind}))
            for member in members:
                self.nodes.pop(member.name, None)
        apart = self.inputs.keys() | self.outputs.keys() | self.out_buffers
        main: list[Node | OperatorGraph] = [n for name, n in self.nodes.items() if name not in apart]
        return FXOperatorGraph(
            graph_name="base",
            elements=[
                FXOperatorGraph(graph_name="inputs", elements=list(self.inputs.values())),
                FXOperatorGraph(graph_name="forward", elements=main + modules),
                FXOperatorGraph(graph_name="outputs", elements=list(self.outputs.values())),
            ],
        )
