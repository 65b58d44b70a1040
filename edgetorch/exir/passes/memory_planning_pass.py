"""MemoryPlanningPass: give every non-constant tensor of a method an arena (mem_id) and an offset.

The last pass before emission. Which tensors are planned is configurable
(graph inputs, graph outputs, mutable buffers); the placement algorithm is
``"greedy"``, ``"naive"``, or any callable with ExecuTorch's algorithm signature
``algo(alignment, specs, graph_module, graph_signature, extra_padding)`` returning a
``MemoryAlgoResult`` or the arena sizes (a ``MemoryPlanningAlgorithmSuite`` is one).
Specs may carry a preset ``mem_id`` to use several arenas. May import torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch.export.graph_signature import ExportGraphSignature
from torch.fx.passes.infra.pass_base import PassBase, PassResult

from edgetorch.exir.memory_planning import (
    ALGORITHMS,
    MemoryPlan,
    MemoryPlanningAlgorithmSuite,
    assign_lifetimes,
    plan_per_device,
)
from edgetorch.exir.passes.spec_prop import TRAINABLE, graph_specs
from edgetorch.exir.tensor import TensorSpec, spec_leaves


class MemoryPlanningPass(PassBase):
    """Plan the memory of one method; the result is ``self.plan`` and ``gm.meta["non_const_buffer_sizes"]``."""

    def __init__(
        self,
        memory_planning_algo: str | Callable[..., object] | None = None,
        allow_lifetime_and_storage_overlap: bool = False,
        alloc_graph_input: bool = True,
        alloc_graph_output: bool = True,
        alloc_mutable_buffers: bool = True,
        alignment: int = 16,
        enable_non_cpu_memory_planning: bool = False,
    ):
        """ExecuTorch's signature. ``memory_planning_algo`` is None (a ``MemoryPlanningAlgorithmSuite`` of
        greedy), ``"greedy"``, ``"naive"``, or a callable with ExecuTorch's algorithm signature such as
        :func:`edgetorch.exir.memory_planning.greedy`.
        ``enable_non_cpu_memory_planning`` plans the tensors a device delegate reads and writes (tagged by
        ``PropagateDevicePass``) in arenas of their own device (``ExecutorchBackendConfig`` sets it).
        ``allow_lifetime_and_storage_overlap`` only relaxes ExecuTorch's debug-time plan check; it is
        accepted for that signature and changes nothing here (no algorithm places live tensors together).
        """
        algo = MemoryPlanningAlgorithmSuite() if memory_planning_algo is None else memory_planning_algo
        if isinstance(algo, str) and algo not in ALGORITHMS:
            raise ValueError(
                f"unknown memory planning algorithm {algo!r}; expected one of {sorted(ALGORITHMS)} or a callable"
            )
        if not isinstance(algo, str):
            _check_signature(algo)
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError(f"alignment must be a power of two, found {alignment}")
        self.memory_planning_algo = ALGORITHMS[algo] if isinstance(algo, str) else algo
        self.allow_lifetime_and_storage_overlap = allow_lifetime_and_storage_overlap
        self.alloc_graph_input = alloc_graph_input
        self.alloc_graph_output = alloc_graph_output
        self.alloc_mutable_buffers = alloc_mutable_buffers
        self.alignment = alignment
        self.enable_non_cpu_memory_planning = enable_non_cpu_memory_planning
        self.plan: MemoryPlan | None = None

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        return self.run(graph_module)

    def run(
        self, graph_module: torch.fx.GraphModule, graph_signature: ExportGraphSignature | None = None
    ) -> PassResult:
        """Plan ``graph_module``; ``graph_signature`` tells user inputs from mutable buffers."""
        assign_lifetimes(graph_module)
        skipped = {id(s) for s in self._unplanned(graph_module, graph_signature)}
        aliases = [s for s in graph_specs(graph_module) if s.storage_base is not None]
        for alias in aliases:  # a view keeps its base alive
            base = alias.storage_base
            base.lifetime = [min(base.lifetime[0], alias.lifetime[0]), max(base.lifetime[1], alias.lifetime[1])]
        specs = [
            s for s in graph_specs(graph_module) if not s.const and s.storage_base is None and id(s) not in skipped
        ]
        bufsizes = plan_per_device(
            self.memory_planning_algo,
            self.alignment,
            specs,
            graph_module,
            graph_signature,
            enable_non_cpu_memory_planning=self.enable_non_cpu_memory_planning,
        )
        for alias in aliases:
            alias.mem_id = alias.storage_base.mem_id
            alias.mem_offset = alias.storage_base.mem_offset + alias.storage_base_offset
        unplanned = [s for s in graph_specs(graph_module) if id(s) in skipped and not s.const]
        self.plan = MemoryPlan(specs, bufsizes, self.alignment, unplanned)
        return PassResult(graph_module, True)

    def _set_alloc_node_spec(self, graph_module: torch.fx.GraphModule) -> None:
        """Give each ``memory.alloc`` feeding an out-variant call the spec of the result it receives, where the
        alloc has none yet (ToOutVarPass sets them; hand-built graphs may not)."""
        from edgetorch.exir import memory
        from edgetorch.exir.memory_planning import _is_out_var_node, get_node_tensor_specs

        for module in graph_module.modules():
            if not isinstance(module, torch.fx.GraphModule):
                continue
            for node in module.graph.nodes:
                if not _is_out_var_node(node):
                    continue
                schema = node.target._schema if hasattr(node.target, "_schema") else node.target._op._schema
                outs = [a.name for a in schema.arguments if a.kwarg_only and a.alias_info and a.alias_info.is_write]
                specs = get_node_tensor_specs(node)
                allocs = [node.kwargs.get(name) for name in outs]
                allocs = [a for a in allocs if isinstance(a, torch.fx.Node)]
                for alloc, spec in zip(allocs, specs):
                    if alloc.op == "call_function" and alloc.target is memory.alloc and "spec" not in alloc.meta:
                        alloc.meta["spec"] = spec
                if len(outs) == 1 and allocs and "_share_alloc_with_arg_idx" in node.meta:
                    shared = node.args[node.meta["_share_alloc_with_arg_idx"]]
                    spec = node.meta.get("spec")
                    if isinstance(shared, torch.fx.Node) and isinstance(spec, TensorSpec):
                        spec.storage_base = shared.meta.get("spec")
                        spec.storage_base_offset = node.meta.get("_shared_alloc_offset", 0)

    def _unplanned(self, gm: torch.fx.GraphModule, signature: ExportGraphSignature | None) -> list[TensorSpec]:
        buffers = set(signature.inputs_to_buffers) if signature is not None else set()
        skipped: list[TensorSpec] = []
        for node in gm.graph.nodes:
            if node.op == "placeholder" and not node.meta.get(TRAINABLE, False):  # trainable weights: always
                keep = self.alloc_mutable_buffers if node.name in buffers else self.alloc_graph_input
                skipped += [] if keep else spec_leaves(node.meta.get("spec"))
        if not self.alloc_graph_output:
            outputs = gm.graph.output_node().args[0]
            skipped += spec_leaves([a.meta.get("spec") for a in outputs if isinstance(a, torch.fx.Node)])
        return skipped


def _check_signature(algo: Callable[..., object]) -> None:
    """TypeError now, rather than at ``to_executorch``, for a callable that cannot take ExecuTorch's five arguments."""
    if not callable(algo):
        raise TypeError(f"memory_planning_algo must be a name or a callable; found {type(algo).__name__}")
    try:
        inspect.signature(algo).bind(16, [], None, None, 0)
    except TypeError as error:
        raise TypeError(
            f"memory planning algorithm {algo!r} cannot be called as algo(alignment, specs, graph_module, "
            f"graph_signature, extra_padding) ({error}); write it to ExecuTorch's algorithm signature"
        ) from None
    except ValueError:
        pass  # a builtin without an inspectable signature: trusted
