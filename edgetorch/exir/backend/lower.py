"""``to_edge_transform_and_lower`` and ``EdgeProgramManager.to_backend``'s implementation.

``to_edge_transform_and_lower`` is the recommended one-call path: ATen ->
Edge (keeping whole the ops the partitioners ask for), user passes, then each
partitioner in turn. May import torch and edgetorch.exir (``program.py`` lazily,
because it calls back into this module).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.export import ExportedProgram

from edgetorch.exir.backend.backend_api import partition_and_lower
from edgetorch.exir.backend.partitioner import Partitioner

if TYPE_CHECKING:
    from edgetorch.exir.program import EdgeCompileConfig, EdgeProgramManager

__all__ = ["edge_manager_to_backend", "ops_to_keep", "to_edge_transform_and_lower"]

PartitionerArg = Partitioner | type[Partitioner]


def to_edge_transform_and_lower(
    programs: ExportedProgram | Mapping[str, ExportedProgram],
    transform_passes: Sequence[Any] | Mapping[str, Sequence[Any]] | None = None,
    partitioner: Sequence[PartitionerArg] | Mapping[str, Sequence[PartitionerArg]] | None = None,
    constant_methods: Mapping[str, Any] | None = None,
    compile_config: EdgeCompileConfig | None = None,
) -> EdgeProgramManager:
    """Lower exported programs to Edge, run ``transform_passes``, then delegate with each partitioner in order.

    ``partitioner`` is a list applied to every method or a dict method -> list.
    Ops a partitioner names in ``ops_to_not_decompose`` reach it undecomposed.
    """
    from edgetorch.exir.program import EdgeCompileConfig, EdgeProgramManager, lower_to_edge

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
    rounds = max((len(p) for p in per_method.values()), default=0)
    for i in range(rounds):
        manager = edge_manager_to_backend(manager, {n: p[i] for n, p in per_method.items() if i < len(p)})
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
    from edgetorch.exir.program import EdgeProgramManager

    chosen = partitioner if isinstance(partitioner, Mapping) else dict.fromkeys(manager.methods, partitioner)
    unknown = set(chosen) - manager.methods
    if unknown:
        raise KeyError(f"partitioners given for methods {sorted(unknown)}, which this program does not have")
    programs = {
        name: partition_and_lower(manager.exported_program(name), chosen[name])
        if name in chosen
        else manager.exported_program(name)
        for name in manager._edge_programs
    }
    return EdgeProgramManager(programs, manager._constant_methods, manager.compile_config)
