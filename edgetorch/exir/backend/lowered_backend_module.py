"""``LoweredBackendModule``: an Edge program compiled by one backend, usable as an ``nn.Module``.

It keeps the backend id, the blob from ``preprocess``, the compile specs and the
original Edge program. Calling it records an ``executorch_call_delegate`` node
when traced by ``torch.export`` and runs the original program eagerly;
``buffer()`` serializes it alone as a ``.pte`` whose ``forward`` is one
delegate call. May import torch and edgetorch.exir.
"""

from __future__ import annotations

import operator
from typing import Any

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
    TensorArgument,
)

from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.delegate import executorch_call_delegate

__all__ = ["LoweredBackendModule", "user_inputs", "user_outputs"]


class LoweredBackendModule(torch.nn.Module):
    """A module lowered to ``backend_id``: ``processed_bytes`` is what the runtime backend executes."""

    def __init__(
        self,
        edge_program: ExportedProgram,
        backend_id: str,
        processed_bytes: bytes,
        compile_specs: list[CompileSpec],
        named_data_store_output: Any = None,
    ) -> None:
        super().__init__()
        self._original_exported_program = edge_program
        self._backend_id = backend_id
        self._processed_bytes = bytes(processed_bytes)
        self._compile_specs = list(compile_specs)
        self._named_data_store_output = named_data_store_output
        self.meta: dict[str, Any] = {}

    @property
    def backend_id(self) -> str:
        """The backend (runtime registry name) that executes this module."""
        return self._backend_id

    @property
    def processed_bytes(self) -> bytes:
        """The blob ``preprocess`` produced; stored in the program as the delegate's data."""
        return self._processed_bytes

    @property
    def compile_specs(self) -> list[CompileSpec]:
        """The compile specs given to ``preprocess``, also stored with the delegate."""
        return self._compile_specs

    @property
    def original_module(self) -> ExportedProgram:
        """The Edge program this module was lowered from (what runs when it is called eagerly)."""
        return self._original_exported_program

    @property
    def named_data_store_output(self) -> Any:
        """Named data (e.g. shared weights) the backend asked to store in the program, if any."""
        return self._named_data_store_output

    def forward(self, *args: Any) -> Any:
        return executorch_call_delegate(self, *args)

    def program(self) -> ExportedProgram:
        """An Edge program whose only computation is one call of this delegate on the user inputs."""
        original = self._original_exported_program
        root, graph = torch.nn.Module(), torch.fx.Graph()
        root.lowered_module_0 = self
        inputs = []
        for node in user_inputs(original):
            placeholder = graph.placeholder(node.name)
            placeholder.meta["val"] = node.meta["val"]
            inputs.append(placeholder)
        call = graph.call_function(executorch_call_delegate, (graph.get_attr("lowered_module_0"), *inputs))
        out_spec = original.call_spec.out_spec
        call.meta["val"] = pytree.tree_unflatten([n.meta["val"] for n in user_outputs(original)], out_spec)
        outputs = [call] if out_spec.is_leaf() else _unpack(graph, call)
        graph.output(tuple(outputs))
        signature = ExportGraphSignature(
            input_specs=[InputSpec(InputKind.USER_INPUT, TensorArgument(n.name), None) for n in inputs],
            output_specs=[OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(n.name), None) for n in outputs],
        )
        call_signature = ModuleCallSignature(
            inputs=[], outputs=[], in_spec=original.call_spec.in_spec, out_spec=out_spec
        )
        return ExportedProgram(
            root=root,
            graph=graph,
            graph_signature=signature,
            state_dict={},
            range_constraints=original.range_constraints,
            module_call_graph=[ModuleCallEntry("", call_signature)],
            example_inputs=original.example_inputs,
            constants={},
            verifiers=original.verifiers,
        )

    def buffer(
        self,
        extract_delegate_segments: bool = False,
        segment_alignment: int = 128,
        constant_tensor_alignment: int | None = None,
        delegate_alignment: int | None = None,
        memory_planning: Any = None,
    ) -> bytes:
        """A standalone ``.pte`` whose method ``forward`` runs just this delegate."""
        from edgetorch.exir.to_executorch import ExecutorchBackendConfig, ExecutorchProgramManager

        config = ExecutorchBackendConfig(
            extract_delegate_segments=extract_delegate_segments,
            segment_alignment=segment_alignment,
            constant_tensor_alignment=constant_tensor_alignment,
            delegate_alignment=delegate_alignment,
        )
        if memory_planning is not None:
            config.memory_planning_pass = memory_planning
        return ExecutorchProgramManager(self.program(), config=config).buffer


def _unpack(graph: torch.fx.Graph, call: torch.fx.Node) -> list[torch.fx.Node]:
    items = []
    for i, val in enumerate(call.meta["val"]):
        item = graph.call_function(operator.getitem, (call, i))
        item.meta["val"] = val
        items.append(item)
    return items


def user_inputs(program: ExportedProgram) -> list[torch.fx.Node]:
    """The placeholders of ``program`` that are user inputs, in call order."""
    names = {s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT}
    return [n for n in program.graph.nodes if n.op == "placeholder" and n.name in names]


def user_outputs(program: ExportedProgram) -> list[torch.fx.Node]:
    """The output values of ``program`` returned to the user (not buffer mutations), in order."""
    values = program.graph.output_node().args[0]
    specs = program.graph_signature.output_specs
    return [v for v, s in zip(values, specs) if s.kind == OutputKind.USER_OUTPUT]
