"""The demo backend of the tutorial: ``BackendWithCompilerDemo`` and ``AddMulPartitionerDemo``.

``BackendWithCompilerDemo.preprocess`` compiles a whole Edge program of simple
ops (see ``edgetorch.backends.demo.runtime.OPS``) into the small text format described in
``edgetorch.backends.demo.runtime``, whose ``DemoBackend`` runs it. ``AddMulPartitionerDemo``
delegates connected chains of ``mm``/``add``/``mul`` to it. May import torch.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from edgetorch.backends.demo.runtime import BACKEND_ID, VERSION
from edgetorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.lowered_backend_module import user_outputs
from edgetorch.exir.backend.partition_utils import group_supported_nodes, tag_constant_data, tag_partitions
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.backend.utils import DelegateMappingBuilder
from edgetorch.exir.dialects import to_aten

__all__ = ["AddMulPartitionerDemo", "BackendWithCompilerDemo"]

aten = torch.ops.aten

BLOB_OPS: dict[torch._ops.OpOverload, str] = {
    aten.sin.default: "sin",
    aten.cos.default: "cos",
    aten.exp.default: "exp",
    aten.tanh.default: "tanh",
    aten.abs.default: "abs",
    aten.neg.default: "neg",
    aten.relu.default: "relu",
    aten.sigmoid.default: "sigmoid",
    aten.add.Tensor: "add",
    aten.sub.Tensor: "sub",
    aten.mul.Tensor: "mul",
    aten.div.Tensor: "div",
    aten.maximum.default: "maximum",
    aten.minimum.default: "minimum",
    aten.mm.default: "mm",
    aten.linear.default: "linear",
}
"""ATen op -> its name in the demo blob (``edgetorch.backends.demo.runtime.OPS`` implements each)."""

_CONSTANT_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)


class BackendWithCompilerDemo(BackendDetails):
    """Compiles a whole program of simple element-wise ops and ``mm`` into the demo text format."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram, compile_specs: list[CompileSpec]) -> PreprocessResult:
        writer = _BlobWriter(edge_program)
        for node in edge_program.graph.nodes:
            writer.add(node)
        return writer.result()


def _unsupported(node: torch.fx.Node, what: str) -> RuntimeError:
    return RuntimeError(f"{what} (node {node.format_node()}) is not supported in backend {BACKEND_ID}")


def _dtype_name(node: torch.fx.Node, dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if not hasattr(np, name):
        raise _unsupported(node, f"dtype {dtype}")
    return name


class _BlobWriter:
    """Accumulates the lines and constant data of one demo blob."""

    def __init__(self, program: ExportedProgram) -> None:
        self.program = program
        self.specs = {s.arg.name: s for s in program.graph_signature.input_specs}
        self.lines = [f"{BACKEND_ID} {VERSION}"]
        self.data = bytearray()
        self.debug_map = DelegateMappingBuilder(generated_identifiers=True)

    def add(self, node: torch.fx.Node) -> None:
        if node.op == "placeholder":
            self._placeholder(node)
        elif node.op == "call_function":
            self._op(node)
        elif node.op == "output":
            if len(user_outputs(self.program)) != len(self.program.graph_signature.output_specs):
                raise _unsupported(node, "mutating a buffer")
            self.lines.append("output " + " ".join(n.name for n in user_outputs(self.program)))
        else:
            raise _unsupported(node, f"a {node.op} node")

    def _placeholder(self, node: torch.fx.Node) -> None:
        spec = self.specs[node.name]
        if spec.kind == InputKind.USER_INPUT:
            self.lines.append(f"input {node.name} {_dtype_name(node, node.meta['val'].dtype)}")
            return
        if spec.kind not in _CONSTANT_KINDS:
            raise _unsupported(node, f"an input of kind {spec.kind.name}")
        source = self.program.state_dict if spec.target in self.program.state_dict else self.program.constants
        tensor = source[spec.target].detach().contiguous()
        raw = tensor.numpy().astype(tensor.numpy().dtype.newbyteorder("<")).tobytes()
        shape = ",".join(str(d) for d in tensor.shape)
        dtype = _dtype_name(node, tensor.dtype)
        self.lines.append(f"const {node.name} {dtype} [{shape}] {len(self.data)} {len(raw)}")
        self.data += raw

    def _op(self, node: torch.fx.Node) -> None:
        op = to_aten(node.target)
        if op not in BLOB_OPS:
            raise _unsupported(node, f"operator {op}")
        args = [self._arg(node, a) for a in node.args]
        extra = set(node.kwargs) - {"alpha"}
        if extra:
            raise _unsupported(node, f"keyword arguments {sorted(extra)}")
        if "alpha" in node.kwargs:
            args.append(self._arg(node, node.kwargs["alpha"]))
        dtype = _dtype_name(node, node.meta["val"].dtype)
        self.lines.append(f"op {node.name} {dtype} {BLOB_OPS[op]} {' '.join(args)}".rstrip())
        if "debug_handle" in node.meta:
            self.debug_map.insert_delegate_mapping_entry(nodes=node)

    @staticmethod
    def _arg(node: torch.fx.Node, value: object) -> str:
        if isinstance(value, torch.fx.Node):
            return value.name
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _unsupported(node, f"argument {value!r}")
        return f"#{float(value)!r}"

    def result(self) -> PreprocessResult:
        self.lines.append(f"data {len(self.data)}")
        blob = ("\n".join(self.lines) + "\n").encode() + bytes(self.data)
        return PreprocessResult(processed_bytes=blob, debug_handle_map=self.debug_map.get_delegate_mapping() or None)


class AddMulPartitionerDemo(Partitioner):
    """Delegates connected chains of ``mm``, ``add`` and ``mul`` to BackendWithCompilerDemo (one tag per chain)."""

    SUPPORTED = (aten.mm.default, aten.add.Tensor, aten.mul.Tensor)

    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        groups = group_supported_nodes(exported_program.graph_module, self._is_supported)
        tags = tag_partitions(groups)
        tag_constant_data(exported_program)
        spec = DelegationSpec(BACKEND_ID, [])
        return PartitionResult(exported_program, dict.fromkeys(tags, spec))

    def _is_supported(self, node: torch.fx.Node) -> bool:
        return to_aten(node.target) in self.SUPPORTED
