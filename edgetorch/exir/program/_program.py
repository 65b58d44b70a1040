"""``to_edge`` and ``EdgeProgramManager``: ATen programs lowered to the Edge dialect.

``to_edge`` decomposes each exported method to Core ATen, rewrites it into
Edge ops (see ``passes/to_edge.py``), lifts new constants and checks the
result. The manager holds one Edge ``ExportedProgram`` per method, applies
user passes (``transform``), delegates to backends (``to_backend``) and hands
everything to the back half (``to_executorch``). ``to_edge_transform_and_lower``
is the recommended one-call path: ATen -> Edge (keeping whole the ops the
partitioners ask for), user passes, then each partitioner in turn. May import
torch and edgetorch.exir.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch._export.verifier import Verifier
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
)
from torch.fx.passes.infra.pass_manager import PassManager as TorchPassManager

from edgetorch._lazy import lazy_exports
from edgetorch.exir.backend.backend_api import lower_methods
from edgetorch.exir.backend.partitioner import Partitioner
from edgetorch.exir.pass_base import ExportedProgramPassBase, PassManager, PassType, flatten_passes
from edgetorch.exir.pass_manager import ExportedProgramPassManager, updated_graph_signature
from edgetorch.exir.passes.debug_handle_generator_pass import assign_debug_handles
from edgetorch.exir.passes.decompose import decompose
from edgetorch.exir.passes.fold_redundant_qdq_pass import FoldRedundantDequantizeQuantizePass
from edgetorch.exir.passes.lift_constants import lift_constants
from edgetorch.exir.passes.prune_empty_tensors_pass import PruneEmptyTensorsPass
from edgetorch.exir.passes.remove_unused_parameters_pass import remove_unused_parameters_pass
from edgetorch.exir.passes.to_edge import ToEdgePass
from edgetorch.exir.verification import EdgeVerifier, check_preserve_ops, verify_aten_graph, verify_edge_graph

if TYPE_CHECKING:
    from edgetorch.exir.to_executorch import ExecutorchBackendConfig, ExecutorchProgramManager

__all__ = [
    "EdgeCompileConfig",
    "EdgeProgramManager",
    "edge_manager_to_backend",
    "lower_to_edge",
    "ops_to_keep",
    "to_edge",
    "to_edge_transform_and_lower",
]

# Where ExecuTorch's docs import it from (``executorch.exir.program``); it lives in the back half.
__getattr__ = lazy_exports("edgetorch.exir", {"ExecutorchProgramManager": "to_executorch"})


@dataclass
class EdgeCompileConfig:
    """Options of the ATen -> Edge lowering.

    ``_check_ir_validity``: verify input and output graphs (raise on invalid IR).
    ``_skip_dim_order``: keep ``_to_copy``/``clone`` instead of ``dim_order_ops``.
    ``_core_aten_ops_exception_list``: non-core ATen ops accepted without decomposition.
    ``preserve_ops``: ATen ops kept whole through decomposition (e.g. for a backend).
    """

    _check_ir_validity: bool = True
    _skip_dim_order: bool = False
    _core_aten_ops_exception_list: list[torch._ops.OpOverload] = field(default_factory=list)
    preserve_ops: list[torch._ops.OpOverload] = field(default_factory=list)

    def __post_init__(self) -> None:
        # None means none, as ExecuTorch's callers pass it.
        self._core_aten_ops_exception_list = list(self._core_aten_ops_exception_list or [])
        self.preserve_ops = list(self.preserve_ops or [])


def rebuild_program(program: ExportedProgram, graph_module: torch.fx.GraphModule) -> ExportedProgram:
    """An Edge ExportedProgram around ``graph_module``, a transformed copy of ``program``'s graph.

    Tensor constants left as attributes are lifted to inputs; the graph
    signature is re-pointed at the new graph's placeholders and outputs, which
    must come in the same order as ``program``'s.
    """
    specs, constants = lift_constants(graph_module, program.graph_signature.input_specs, program.constants)
    signature = updated_graph_signature(ExportGraphSignature(specs, program.graph_signature.output_specs), graph_module)
    assign_debug_handles(graph_module)
    return ExportedProgram(
        root=graph_module,
        graph=graph_module.graph,
        graph_signature=signature,
        state_dict=program.state_dict,
        range_constraints=program.range_constraints,
        module_call_graph=program.module_call_graph,
        example_inputs=program.example_inputs,
        constants=constants,
        verifiers=[EdgeVerifier],
    )


def _transform(
    self: ExportedProgram, *passes: PassType, override_verifiers: list[type[Verifier]] | None = None
) -> ExportedProgram:
    """``self`` with ``passes`` applied (graph passes or ExportedProgram passes), or ``self`` if none changed it.

    ExecuTorch's helper for transforming one ExportedProgram; ``override_verifiers`` replaces the
    program's verifiers, for passes whose output the default verifier would refuse.
    """
    if any(isinstance(p, list | Verifier) for p in passes):
        raise TypeError(
            f"_transform takes passes as separate arguments, found {[type(p).__name__ for p in passes]}; "
            "unpack a list with *passes and give verifiers as override_verifiers="
        )
    return _transform_with_pass_manager(self, ExportedProgramPassManager(list(passes)), override_verifiers)


def _transform_with_pass_manager(
    self: ExportedProgram,
    pass_manager: ExportedProgramPassManager | PassManager,
    override_verifiers: list[type[Verifier]] | None = None,
) -> ExportedProgram:
    """``self`` transformed by ``pass_manager`` (an ExportedProgram manager, or a graph PassManager)."""
    if isinstance(pass_manager, ExportedProgramPassManager):
        result = pass_manager(self, override_verifiers)
        return result.exported_program if result.modified else self
    graph_result = pass_manager(self.graph_module)
    if not graph_result.modified:
        return self
    program = copy.copy(self)
    program._graph_module = graph_result.graph_module
    program._graph_signature = updated_graph_signature(self.graph_signature, graph_result.graph_module)
    if override_verifiers:
        program._verifiers = override_verifiers
    program.validate()
    return program


def lower_to_edge(
    program: ExportedProgram,
    compile_config: EdgeCompileConfig | None = None,
    ops_to_not_decompose: Iterable[torch._ops.OpOverload] = (),
) -> ExportedProgram:
    """One ATen ExportedProgram lowered to the Edge dialect (verified if the config asks).

    ``ops_to_not_decompose`` adds to ``compile_config.preserve_ops``; it is the
    hook a partitioner uses to keep ops it will delegate whole.
    """
    config = compile_config or EdgeCompileConfig()
    keep = [*config.preserve_ops, *ops_to_not_decompose]
    if config._check_ir_validity:
        verify_aten_graph(program.graph_module)
    program = remove_unused_parameters_pass(decompose(program, keep))
    PruneEmptyTensorsPass()(program.graph_module)
    # a dequantize right before a quantize of the same parameters is the identity (what is left when
    # decomposition erased a quantized no-op such as eval-mode dropout): folded, as ExecuTorch's to_edge does
    FoldRedundantDequantizeQuantizePass()(program.graph_module)
    graph_module = ToEdgePass(skip_dim_order=config._skip_dim_order)(program.graph_module).graph_module
    edge = rebuild_program(program, graph_module)
    if config._check_ir_validity:
        verify_edge_graph(edge.graph_module, [*keep, *config._core_aten_ops_exception_list])
    return edge


def to_edge(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
    generate_etrecord: bool = False,
) -> EdgeProgramManager:
    """Lower exported programs to the Edge dialect.

    ``programs`` is one ExportedProgram (the method "forward") or a dict of
    method name -> ExportedProgram. ``constant_methods`` maps extra method
    names to the constant each returns (config values stored in the program).
    ``generate_etrecord``: record what the Inspector needs; after ``to_executorch()``
    its ``get_etrecord()`` returns the ETRecord.
    """
    if isinstance(constant_methods, EdgeCompileConfig):
        raise TypeError("to_edge's second argument is constant_methods; pass the config as compile_config=...")
    config = compile_config or EdgeCompileConfig()
    if config._check_ir_validity:
        check_preserve_ops(config.preserve_ops)
    named = {"forward": programs} if isinstance(programs, ExportedProgram) else dict(programs)
    edge = {name: lower_to_edge(program, config) for name, program in named.items()}
    manager = EdgeProgramManager(edge, constant_methods, config)
    return _start_etrecord(manager, programs) if generate_etrecord else manager


def _start_etrecord(manager: EdgeProgramManager, programs: Any) -> EdgeProgramManager:
    """Record the exported program and a copy of the Edge programs (to_executorch changes the originals)."""
    from edgetorch.exir.etrecord import ETRecord

    record = ETRecord()
    record.add_exported_program(programs)  # one program, or a dict's "forward"
    record.add_edge_dialect_program(copy.deepcopy(manager._edge_programs))
    manager._etrecord = record
    return manager


class EdgeProgramManager:
    """One or more Edge-dialect methods (plus constant methods) on their way to a .pte."""

    def __init__(
        self,
        edge_programs: ExportedProgram | Mapping[str, ExportedProgram],
        constant_methods: Mapping[str, Any] | None = None,
        compile_config: EdgeCompileConfig | None = None,
    ) -> None:
        if isinstance(edge_programs, ExportedProgram):  # one program is the method "forward", as in ExecuTorch
            edge_programs = {"forward": edge_programs}
        clash = set(edge_programs) & set(constant_methods or {})
        if clash:
            raise ValueError(f"method names {sorted(clash)} are both programs and constant methods; rename one.")
        self._edge_programs = dict(edge_programs)
        self._constant_methods = dict(constant_methods or {})
        self.compile_config = compile_config or EdgeCompileConfig()
        self._etrecord: Any = None

    @property
    def methods(self) -> set[str]:
        """Names of the program methods."""
        return set(self._edge_programs)

    @property
    def config_methods(self) -> set[str]:
        """Names of the constant methods."""
        return set(self._constant_methods)

    def exported_program(self, method_name: str = "forward") -> ExportedProgram:
        """The Edge ExportedProgram of one method."""
        try:
            return self._edge_programs[method_name]
        except KeyError:
            raise KeyError(f"no method {method_name!r}; this program has {sorted(self.methods)}") from None

    def transform(
        self,
        passes: Sequence[PassType] | Mapping[str, Sequence[PassType]] | PassManager,
        compile_config: EdgeCompileConfig | None = None,
    ) -> EdgeProgramManager:
        """A new manager with ``passes`` applied in order (this one is left unchanged).

        ``passes`` is a sequence run on every method, a dict method -> sequence
        (other methods are copied as they are), or a PassManager. The results are
        verified as Edge dialect unless the config disables IR checks.
        """
        config = compile_config or self.compile_config
        if isinstance(passes, Mapping):
            per_method = {name: passes.get(name) for name in self._edge_programs}
        else:
            per_method = dict.fromkeys(self._edge_programs, passes)
        new = {name: _apply(program, per_method[name], config) for name, program in self._edge_programs.items()}
        return EdgeProgramManager(new, self._constant_methods, config)

    def to_backend(self, partitioner: Any) -> EdgeProgramManager:
        """Delegate what ``partitioner`` tags (one partitioner, or a dict method -> partitioner) to its backends."""
        return edge_manager_to_backend(self, partitioner)

    def to_executorch(self, config: ExecutorchBackendConfig | None = None) -> ExecutorchProgramManager:
        """Lower to the ExecuTorch dialect and serialize (out variants, memory planning, emission)."""
        from edgetorch.exir.to_executorch import ExecutorchProgramManager

        # ExecutorchProgramManager copies each program before changing it; this manager stays as it is.
        program = ExecutorchProgramManager(dict(self._edge_programs), dict(self._constant_methods), config)
        if self._etrecord is not None:
            record = copy.copy(self._etrecord)
            record.add_executorch_program(program)
            program._etrecord = record
        return program

    def get_etrecord(self) -> Any:
        """The ETRecord begun by ``generate_etrecord=True`` (complete only on the executorch manager)."""
        if self._etrecord is None:
            raise RuntimeError("ETRecord was not generated; pass generate_etrecord=True to to_edge")
        return self._etrecord


def _apply(program: ExportedProgram, passes: Any, config: EdgeCompileConfig) -> ExportedProgram:
    program = copy.deepcopy(program)
    if passes is None:
        return program
    if isinstance(passes, TorchPassManager):  # torch.fx's own manager: it runs on the graph module
        passes = PassManager(list(passes.passes))
    if not isinstance(passes, PassManager) and any(
        isinstance(p, ExportedProgramPassBase) for p in flatten_passes(passes)
    ):
        # Whole-program passes may add inputs and constants; they update the signature themselves.
        program = ExportedProgramPassManager(list(passes))(program).exported_program
        graph_module = program.graph_module
    else:
        manager = passes if isinstance(passes, PassManager) else PassManager(list(passes))
        graph_module = manager(program.graph_module).graph_module
    edge = rebuild_program(program, graph_module)
    if config._check_ir_validity:
        verify_edge_graph(edge.graph_module, [*config.preserve_ops, *config._core_aten_ops_exception_list])
    return edge


PartitionerArg = Partitioner | type[Partitioner]


def to_edge_transform_and_lower(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    transform_passes: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None,
    partitioner: Sequence[PartitionerArg] | Mapping[str, Sequence[PartitionerArg]] | None = None,
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
    generate_etrecord: bool = False,
) -> EdgeProgramManager:
    """Lower exported programs to Edge, run ``transform_passes``, then delegate with each partitioner in order.

    ``generate_etrecord`` as in :func:`to_edge` (it records the Edge programs before delegation, as ExecuTorch
    does: the delegate maps name their nodes).

    ``partitioner`` is a list applied to every method or a dict method -> list.
    Ops a partitioner names in ``ops_to_not_decompose`` reach it undecomposed.
    """
    config = compile_config or EdgeCompileConfig()
    named = {"forward": programs} if isinstance(programs, ExportedProgram) else dict(programs)
    per_method = _per_method(partitioner, named)
    kept = {name: ops_to_keep(program, per_method[name]) for name, program in named.items()}
    edge = {name: lower_to_edge(program, config, kept[name]) for name, program in named.items()}
    all_kept = [op for ops in kept.values() for op in ops if op not in config.preserve_ops]
    config = dataclasses.replace(config, preserve_ops=[*config.preserve_ops, *dict.fromkeys(all_kept)])
    manager = EdgeProgramManager(edge, constant_methods, config)
    if transform_passes:
        manager = manager.transform(transform_passes)
    # As ExecuTorch records it: the Edge programs before delegation, whose nodes the delegate maps name.
    record = _start_etrecord(manager, programs)._etrecord if generate_etrecord else None
    if record is not None and transform_passes:
        # As ExecuTorch: the graphs the transform passes left, a reference for numeric-gap comparisons.
        record.add_extra_export_modules({"edge_after_transform": copy.deepcopy(manager)})
    rounds = max((len(p) for p in per_method.values()), default=0)
    for i in range(rounds):
        manager = edge_manager_to_backend(manager, {n: p[i] for n, p in per_method.items() if i < len(p)})
    manager._etrecord = record
    return manager


def _per_method(
    partitioner: Sequence[PartitionerArg] | Mapping[str, Sequence[PartitionerArg]] | None,
    named: Mapping[str, ExportedProgram],
) -> dict[str, list[Partitioner]]:
    """Partitioner instances per method (classes are instantiated)."""
    if partitioner is None:
        chosen: Mapping[str, Sequence[PartitionerArg]] = {}
    elif isinstance(partitioner, Mapping):
        chosen = partitioner
    else:
        chosen = dict.fromkeys(named, partitioner)
    return {name: [p() if isinstance(p, type) else p for p in chosen.get(name, ())] for name in named}


def ops_to_keep(program: ExportedProgram, partitioners: Sequence[Partitioner]) -> list[torch._ops.OpOverload]:
    """The ATen ops to keep out of decomposition for ``partitioners`` on ``program``.

    An op is kept when some partitioner asks for it and that partitioner's
    filter (if any) accepts every node of the op in ``program``; an op the filter
    rejects for some node is decomposed everywhere, so no node is left with an op
    only the backend runs.
    """
    kept: dict[torch._ops.OpOverload, None] = {}
    nodes = [n for n in program.graph.nodes if n.op == "call_function"]
    for partitioner in partitioners:
        ops, accept = partitioner.ops_to_not_decompose(program)
        for op in ops:
            if accept is None or all(accept(n) for n in nodes if n.target is op):
                kept[op] = None
    return list(kept)


def edge_manager_to_backend(
    manager: EdgeProgramManager, partitioner: PartitionerArg | Mapping[str, PartitionerArg]
) -> EdgeProgramManager:
    """What ``EdgeProgramManager.to_backend`` does: a new manager with ``partitioner`` applied.

    ``partitioner`` applies to every method, or is a dict method -> partitioner
    (methods not in it are copied unchanged).
    """
    chosen = partitioner if isinstance(partitioner, Mapping) else dict.fromkeys(manager.methods, partitioner)
    unknown = set(chosen) - manager.methods
    if unknown:
        raise KeyError(f"partitioners given for methods {sorted(unknown)}, which this program does not have")
    programs = lower_methods({name: manager.exported_program(name) for name in manager._edge_programs}, chosen)
    return EdgeProgramManager(programs, manager._constant_methods, manager.compile_config)


def lift_constant_tensor_pass(ep: ExportedProgram) -> ExportedProgram:
    """Turn the tensor ``get_attr`` constants of ``ep``'s graph into persistent buffers (placeholders before the
    first user input, as :func:`~edgetorch.exir.passes.lift_constants.lift_constants` places them, their values
    in ``ep.state_dict``), in place."""
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    if not placeholders:
        return ep
    fake_mode = torch._guards.detect_fake_mode([n.meta.get("val") for n in placeholders])
    known = {**ep.state_dict, **ep.constants}  # names the new buffers must not take
    specs, constants = lift_constants(ep.graph_module, list(ep.graph_signature.input_specs), known)
    lifted = {name: value for name, value in constants.items() if name not in known}
    nodes = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    for k, spec in enumerate(specs):
        value = lifted.get(spec.target) if spec.kind == InputKind.CONSTANT_TENSOR else None
        if value is None:
            continue
        fake = fake_mode.from_tensor(value, static_shapes=True) if fake_mode is not None else value
        fake.constant = value
        nodes[spec.arg.name].meta["val"] = fake
        specs[k] = InputSpec(InputKind.BUFFER, spec.arg, target=spec.target, persistent=True)
        ep.state_dict[spec.target] = value
    ep.graph_signature.input_specs = specs
    return ep


# Ops a partitioner may not keep out of decomposition even when it asks: they break the passes that follow
# (recursion through _to_copy, scalar promotion for the arithmetic ops, list outputs).
_NEVER_PRESERVED = (
    torch.ops.aten._to_copy.default,
    torch.ops.aten.mul.Tensor,
    torch.ops.aten.add.Tensor,
    torch.ops.aten.sub.Tensor,
    torch.ops.aten.div.Tensor,
    torch.ops.aten.item.default,
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.unbind.int,
    torch.ops.aten.split_with_sizes.default,
)


def _remove_invalid_ops_for_not_decompose(preserve_ops: list[torch._ops.OpOverload]) -> list[torch._ops.OpOverload]:
    """The ops of ``preserve_ops`` that can stay whole: not mutating, returning no alias of an input, and not in
    the list above (torchao's ``choose_qparams_affine`` is kept although it aliases). Each op dropped is logged
    once, with why."""
    import logging

    allowed = set()
    try:
        allowed.add(torch.ops.torchao.choose_qparams_affine.default)
    except (AttributeError, RuntimeError):  # torchao's ops not loaded
        pass

    def why_not(op: torch._ops.OpOverload) -> str | None:
        if op in allowed:
            return None
        schema = op._schema
        if schema.is_mutable:
            return "it is mutable"
        if any(r.alias_info is not None for r in schema.returns):
            return "it aliases output"
        if op in _NEVER_PRESERVED:
            return "it is in a blocklist"
        return None

    kept = []
    for op in preserve_ops:
        reason = why_not(op)
        if reason is None:
            kept.append(op)
        elif op not in _WARNED:
            _WARNED.add(op)
            logging.getLogger(__name__).warning(
                "Op %s was requested for preservation by partitioner. This request is ignored because %s.", op, reason
            )
    return kept


_WARNED: set[Any] = set()
