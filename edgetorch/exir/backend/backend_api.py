"""``to_backend``: lower a whole Edge program to a backend, or the parts a partitioner tags.

``to_backend(backend_id, program, compile_specs)`` runs the backend's
``preprocess`` and returns a ``LoweredBackendModule``.
``to_backend(program, partitioner)`` cuts every tagged partition out into its
own program, lowers it, and returns the program with each partition replaced
by an ``executorch_call_delegate`` call on a ``lowered_module_N`` attribute.
Partitions are cut first and compiled afterwards, all partitions of all methods
for one backend in one ``preprocess_multimethod`` call, so a backend can share
data between them. May import torch and edgetorch.exir.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, overload

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.exported_program import ModuleCallEntry, ModuleCallSignature
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    SymIntArgument,
    TensorArgument,
)
from torch.fx.passes.tools_common import legalize_graph

from edgetorch.errors import EdgetorchError
from edgetorch.exir.backend.backend_details import PreprocessResult, find_backend
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.delegate import executorch_call_delegate, get_lowered_module_name
from edgetorch.exir.backend.lowered_backend_module import LoweredBackendModule
from edgetorch.exir.backend.partition_utils import COPIES, TAG, check_partition, nodes_by_tag
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner

__all__ = [
    "LoweredBackendModule",
    "MethodProgramsPartitionerSpec",
    "PartitionerError",
    "disable_validation",
    "lower_methods",
    "to_backend",
    "validation_disabled",
]

Node = torch.fx.Node


class PartitionerError(EdgetorchError, RuntimeError):
    """A partitioner broke its contract (changed the graph, or tagged without a DelegationSpec)."""


_validation = {"enabled": True}


def disable_validation() -> None:
    """Stop checking that partitioners leave the graph unchanged, for the rest of the process."""
    _validation["enabled"] = False


@contextmanager
def validation_disabled() -> Iterator[None]:
    """Inside the block, partitioners are not checked for changing the graph (the check costs a pass over it)."""
    before = _validation["enabled"]
    _validation["enabled"] = False
    try:
        yield
    finally:
        _validation["enabled"] = before


@dataclass
class MethodProgramsPartitionerSpec:
    """Several methods lowered in one ``to_backend`` call: method -> Edge program, method -> its partitioner.

    Methods without a partitioner come back unchanged; a backend compiles the partitions of every
    method together (``preprocess_multimethod``), so it can share data between them.
    """

    method_to_edge_program: Mapping[str, ExportedProgram]
    method_to_partitioner: Mapping[str, Partitioner]


@overload
def to_backend(
    backend_id: str, edge_program: ExportedProgram, compile_specs: list[CompileSpec]
) -> LoweredBackendModule: ...
@overload
def to_backend(edge_program: ExportedProgram, partitioner: Partitioner | type[Partitioner]) -> ExportedProgram: ...
@overload
def to_backend(first: MethodProgramsPartitionerSpec) -> dict[str, ExportedProgram]: ...
def to_backend(first: Any, *args: Any) -> Any:
    """Lower an Edge program to a backend, whole (by backend id) or in partitions (by partitioner).

    ``to_backend("MyBackend", program, compile_specs)`` -> ``LoweredBackendModule``;
    ``to_backend(program, partitioner)`` -> ``ExportedProgram`` with delegate calls;
    ``to_backend(MethodProgramsPartitionerSpec(programs, partitioners))`` -> method -> ``ExportedProgram``.
    A partitioner class is accepted as well as an instance (the tutorial passes the class).
    """
    if isinstance(first, str):
        return lower_program(first, *args)
    if isinstance(first, ExportedProgram):
        return partition_and_lower(first, *args)
    if isinstance(first, MethodProgramsPartitionerSpec) and not args:
        return lower_methods(dict(first.method_to_edge_program), dict(first.method_to_partitioner))
    raise TypeError(
        f"to_backend expects (backend_id: str, ExportedProgram, compile_specs), (ExportedProgram, Partitioner) "
        f"or (MethodProgramsPartitionerSpec), found a first argument of type {type(first).__name__}"
    )


def lower_program(
    backend_id: str, edge_program: ExportedProgram, compile_specs: list[CompileSpec]
) -> LoweredBackendModule:
    """Run backend ``backend_id``'s ``preprocess`` on a copy of ``edge_program`` and wrap the result."""
    if not isinstance(edge_program, ExportedProgram):
        raise TypeError(f"to_backend needs an ExportedProgram to lower, found {type(edge_program).__name__}")
    backend = find_backend(backend_id)
    result = backend.preprocess(copy.deepcopy(edge_program), list(compile_specs))
    lowered = LoweredBackendModule(edge_program, backend_id, b"", compile_specs)
    _fill(lowered, result, backend_id)
    return lowered


def _fill(lowered: LoweredBackendModule, result: Any, backend_id: str) -> None:
    """Give a cut-out module what its backend compiled for it."""
    if not isinstance(result, PreprocessResult):
        raise TypeError(f"{backend_id}.preprocess must return a PreprocessResult, returned {type(result).__name__}")
    lowered._processed_bytes = bytes(result.processed_bytes)
    lowered._named_data_store_output = result.data_store_output
    lowered.meta["debug_handle_map"] = result.debug_handle_map
    if result._delegate_info_meta is not None:
        lowered.meta["_delegate_info_meta"] = result._delegate_info_meta


def partition_and_lower(edge_program: ExportedProgram, partitioner: Partitioner | type[Partitioner]) -> ExportedProgram:
    """Apply ``partitioner`` to a copy of ``edge_program`` and replace every tagged partition by a delegate."""
    return lower_methods({"forward": edge_program}, {"forward": partitioner})["forward"]


def lower_methods(
    programs: dict[str, ExportedProgram], partitioners: dict[str, Partitioner | type[Partitioner]]
) -> dict[str, ExportedProgram]:
    """Partition and lower each method of ``programs`` that has a partitioner (the others pass unchanged).

    Every partition is cut out first; then each backend compiles all of its partitions, of every
    method, in one ``preprocess_multimethod`` call.
    """
    cut: dict[str, ExportedProgram] = {}
    pending: dict[str, dict[str, list[LoweredBackendModule]]] = {}  # backend -> method -> modules
    for name, program in programs.items():
        if name not in partitioners:
            cut[name] = program
            continue
        cut[name], modules = _cut_partitions(program, partitioners[name])
        for module in modules:
            pending.setdefault(module.backend_id, {}).setdefault(name, []).append(module)
    for backend_id, by_method in pending.items():
        backend = find_backend(backend_id)
        results = backend.preprocess_multimethod(
            {m: [copy.deepcopy(x.original_module) for x in mods] for m, mods in by_method.items()},
            {m: [list(x.compile_specs) for x in mods] for m, mods in by_method.items()},
        )
        for method, modules in by_method.items():
            answers = results.get(method, []) if isinstance(results, dict) else []
            if len(answers) != len(modules):
                raise PartitionerError(
                    f"{backend_id}.preprocess_multimethod returned {len(answers)} results for method {method!r}; "
                    f"expected one per partition ({len(modules)}), in the order given"
                )
            for module, answer in zip(modules, answers):
                _fill(module, answer, backend_id)
    return cut


def _cut_partitions(
    edge_program: ExportedProgram, partitioner: Partitioner | type[Partitioner]
) -> tuple[ExportedProgram, list[LoweredBackendModule]]:
    """The program with each tagged partition replaced by a delegate call, and the (not yet compiled) modules."""
    if isinstance(partitioner, type):
        partitioner = partitioner()
    program = copy.deepcopy(edge_program)
    before = _fingerprint(program.graph_module) if _validation["enabled"] else None
    result = partitioner.partition(program)
    tags = result.partition_tags
    if tags is None:
        raise PartitionerError(f"{type(partitioner).__name__}.partition returned partition_tags=None; return a dict")
    program = result.tagged_exported_program
    if before is not None and _fingerprint(program.graph_module) != before:
        raise PartitionerError(
            f"{type(partitioner).__name__}.partition changed the graph; a partitioner may only set node.meta[{TAG!r}] "
            "(or run it inside validation_disabled() if the change is deliberate)"
        )
    _check_tagged_inputs_and_output(program)
    cut = _Cutter(program)
    found = nodes_by_tag(program.graph_module)
    missing = [t for t in found if t not in tags]
    if missing:
        raise PartitionerError(f"nodes are tagged {missing}, but partition_tags has no DelegationSpec for them")
    for tag, nodes in found.items():
        cut.lower(tag, nodes, tags[tag])
    return cut.finish(), cut.modules


def _check_tagged_inputs_and_output(program: ExportedProgram) -> None:
    """A delegate may own constants, never the program's output or a user input: refuse such tags."""
    kinds = {s.arg.name: s.kind for s in program.graph_signature.input_specs}
    constant = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)
    for node in program.graph.nodes:
        if TAG not in node.meta:
            continue
        if node.op == "output":
            raise PartitionerError(
                f"output node {node} should not be tagged; tag the nodes that compute the outputs instead"
            )
        if node.op == "placeholder" and kinds.get(node.name) not in constant:
            raise PartitionerError(
                f"placeholder node for non-params, non-buffer, and non-tensor constants should not be tagged: "
                f"{node} is a {kinds.get(node.name, 'user input')}; tag only parameters, buffers and constants"
            )


def _fingerprint(graph_module: torch.fx.GraphModule) -> list[tuple]:
    return [(n.op, n.name, str(n.target), str(n.args), str(n.kwargs)) for n in graph_module.graph.nodes]


class _Cutter:
    """Replaces partitions of one program by delegate calls, then rebuilds the program once."""

    def __init__(self, program: ExportedProgram) -> None:
        self.program = program
        self.gm = program.graph_module
        self.input_specs = {s.arg.name: s for s in program.graph_signature.input_specs}
        self.state_dict = dict(program.state_dict)
        self.constants = dict(program.constants)
        self.modules: list[LoweredBackendModule] = []
        # Nodes erased so far: a getitem goes with its producer and a copied constant with its last user, whatever
        # their tags, so a later partition's node list (taken before any cut) must skip them.
        self.erased: set[Node] = set()
        signature = program.graph_signature
        mutated = set(signature.buffers_to_mutate.values())
        self.mutated = {name for name, fqn in signature.inputs_to_buffers.items() if fqn in mutated}

    def lower(self, tag: str, nodes: list[Node], spec: DelegationSpec) -> None:
        """Cut the nodes tagged ``tag`` out into a program and call its (yet to be compiled) delegate in their place."""
        nodes = [n for n in nodes if n not in self.erased]
        # A mutated buffer stays the program's even when tagged: the delegate reads it and returns the new
        # value, which the program writes back (a delegate cannot hold state between calls here).
        owned = [n for n in nodes if n.op == "placeholder" and self._is_constant(n) and n.name not in self.mutated]
        ops = _with_getitems([n for n in nodes if n.op == "call_function"])
        if not ops:
            return
        check_partition(ops, tag)
        self._check_owned(owned, ops, tag)
        # Shared constants this partition takes its own copy of (tag_constant_data's copy_shared).
        copied = [a for a in dict.fromkeys(a for n in ops for a in n.all_input_nodes) if tag in a.meta.get(COPIES, ())]
        sub, inputs, outputs = self._extract(owned + copied, ops)
        find_backend(spec.backend_id)  # an unknown backend fails before any work
        lowered = LoweredBackendModule(sub, spec.backend_id, b"", list(spec.compile_specs))
        self.modules.append(lowered)
        self._replace(ops, owned + copied, inputs, outputs, lowered)

    def _is_constant(self, node: Node) -> bool:
        spec = self.input_specs.get(node.name)
        return spec is not None and spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)

    @staticmethod
    def _check_owned(owned: list[Node], ops: list[Node], tag: str) -> None:
        inside = set(ops)
        for node in owned:
            others = [u.name for u in node.users if u not in inside]
            if others:
                raise PartitionerError(
                    f"constant {node.name} is tagged {tag!r} but also used by {others} outside the partition; "
                    "tag a constant only when all its users share its tag"
                )

    def _extract(self, owned: list[Node], ops: list[Node]) -> tuple[ExportedProgram, list[Node], list[Node]]:
        """The partition as its own program; also its external inputs and its outputs (parent nodes)."""
        inside = set(ops) | set(owned)
        inputs = list(dict.fromkeys(a for n in ops for a in n.all_input_nodes if a not in inside))
        outputs = [n for n in ops if any(u not in inside for u in n.users)]
        graph, env = torch.fx.Graph(), {}
        root = torch.nn.Module()
        for node in [*owned, *inputs]:
            env[node] = self._copy_input(graph, root, node)
        for node in ops:
            env[node] = graph.node_copy(node, env.__getitem__)
            env[node].meta.pop(TAG, None)
        graph.output(tuple(env[n] for n in outputs))
        signature = ExportGraphSignature(
            input_specs=[self._owned_spec(n) for n in owned]
            + [InputSpec(InputKind.USER_INPUT, _argument(n), None) for n in inputs if n.op != "get_attr"],
            output_specs=[OutputSpec(OutputKind.USER_OUTPUT, _argument(env[n]), None) for n in outputs],
        )
        user_vals = [n.meta["val"] for n in inputs if n.op != "get_attr"]
        call = ModuleCallSignature(
            inputs=[],
            outputs=[],
            in_spec=pytree.tree_flatten((tuple(user_vals), {}))[1],
            out_spec=pytree.tree_flatten(tuple(n.meta["val"] for n in outputs))[1],
        )
        targets = {self.input_specs[n.name].target for n in owned}
        sub = ExportedProgram(
            root=root,
            graph=graph,
            graph_signature=signature,
            state_dict={k: v for k, v in self.state_dict.items() if k in targets},
            range_constraints=self.program.range_constraints,
            module_call_graph=[ModuleCallEntry("", call)],
            constants={k: v for k, v in self.constants.items() if k in targets},
            verifiers=self.program.verifiers,
        )
        return sub, [n for n in inputs if n.op != "get_attr"], outputs

    def _copy_input(self, graph: torch.fx.Graph, root: torch.nn.Module, node: Node) -> Node:
        if node.op == "get_attr":
            setattr(root, node.target, getattr(self.gm, node.target))
            attr = graph.node_copy(node)
            for key in (TAG, COPIES):  # a subgraph the partition owns must not carry the outer partition's tag
                attr.meta.pop(key, None)
            return attr
        placeholder = graph.placeholder(node.name)
        placeholder.meta = {k: v for k, v in node.meta.items() if k not in (TAG, COPIES)}
        return placeholder

    def _owned_spec(self, node: Node) -> InputSpec:
        spec = self.input_specs[node.name]
        return InputSpec(spec.kind, TensorArgument(node.name), spec.target, spec.persistent)

    def _replace(
        self, ops: list[Node], owned: list[Node], inputs: list[Node], outputs: list[Node], lowered: LoweredBackendModule
    ) -> None:
        graph = self.gm.graph
        name = get_lowered_module_name(self.gm, lowered)
        with graph.inserting_before(ops[-1]):
            module = graph.get_attr(name)
            call = graph.call_function(executorch_call_delegate, (module, *inputs))
            call.meta["val"] = tuple(n.meta["val"] for n in outputs)
            call.meta["debug_handle"] = self._next_debug_handle()
            items = [graph.call_function(operator.getitem, (call, i)) for i in range(len(outputs))]
        inside = set(ops)
        for item, node in zip(items, outputs):
            item.meta["val"] = node.meta["val"]
            node.replace_all_uses_with(item, delete_user_cb=lambda user: user not in inside)
        for node in reversed(ops):
            graph.erase_node(node)
        self.erased.update(ops)
        for node in owned:
            if node.users:  # a copied constant that the program still reads
                continue
            spec = self.input_specs.pop(node.name)
            self.state_dict.pop(spec.target, None)
            self.constants.pop(spec.target, None)
            graph.erase_node(node)
            self.erased.add(node)

    def _next_debug_handle(self) -> int:
        return 1 + max((n.meta.get("debug_handle", 0) for n in self.gm.graph.nodes), default=0)

    def finish(self) -> ExportedProgram:
        """The program with its delegate calls (tags removed, signature matching the new graph)."""
        # A delegate call stands where its partition's last node stood, so an undelegated node that sat between
        # the partition's nodes and reads its result now comes before the call: sort the graph once, at the end
        # (sorting after each cut cost a whole new graph and its code per partition).
        if self.modules:
            legalize_graph(self.gm)  # sets a new graph on the module
            output = self.gm.graph.output_node()
            last = next(iter(reversed(self.gm.graph.nodes)))
            if last is not output:  # legalize_graph sorts a dead node (one with no users) after the output
                last.append(output)
        graph = self.gm.graph
        for node in graph.nodes:
            node.meta.pop(TAG, None)
            node.meta.pop(COPIES, None)
        self.gm.recompile()
        placeholders = [n.name for n in graph.nodes if n.op == "placeholder"]
        outputs = graph.output_node().args[0]
        output_specs = [
            OutputSpec(s.kind, _argument(v) if isinstance(v, Node) else s.arg, s.target)
            for s, v in zip(self.program.graph_signature.output_specs, outputs)
        ]
        return ExportedProgram(
            root=self.gm,
            graph=graph,
            graph_signature=ExportGraphSignature([self.input_specs[n] for n in placeholders], output_specs),
            state_dict=self.state_dict,
            range_constraints=self.program.range_constraints,
            module_call_graph=self.program.module_call_graph,
            example_inputs=self.program.example_inputs,
            constants=self.constants,
            verifiers=self.program.verifiers,
        )


def _with_getitems(ops: list[Node]) -> list[Node]:
    """``ops`` plus the ``getitem`` users of its multi-output nodes, which must go where their producer goes."""
    items = [
        u for n in ops if isinstance(n.meta.get("val"), tuple | list) for u in n.users if u.target is operator.getitem
    ]
    if not items:
        return ops
    order = {n: i for i, n in enumerate(ops[0].graph.nodes)}
    return sorted(set(ops) | set(items), key=order.__getitem__)


def _argument(node: Node) -> TensorArgument | SymIntArgument:
    if isinstance(node.meta.get("val"), torch.SymInt):
        return SymIntArgument(node.name)
    return TensorArgument(node.name)
