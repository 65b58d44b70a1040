"""Emission: a planned execution-dialect graph -> an ExecutionPlan of the Program schema.

One emitter per method builds the values table, the deduplicated operator
list, one chain of instructions (kernel calls, delegate calls, and jump/move
instructions for ``torch.cond``) and a debug map from instruction index to the
graph node it came from. Constant tensors and delegate blobs go to
:class:`ProgramData`, shared by all methods, which becomes the file's segments;
constants tagged for external storage (``node.meta["constant_tag"]``, see
``passes.external_constants_pass``) and backends' named data go to its
``NamedDataStore`` instead. :func:`emit_program` emits every method of a
program (and its constant methods) into one Program. May import torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.utils._pytree import TreeSpec, tree_flatten, tree_structure, tree_unflatten, treespec_dumps

from edgetorch.errors import UnsupportedOperatorError
from edgetorch.exir import memory
from edgetorch.exir.dialects import to_aten
from edgetorch.exir.dialects.quantized import OutOverload
from edgetorch.exir.error import InternalError
from edgetorch.exir.named_data_store import NamedDataStore, NamedDataStoreOutput
from edgetorch.exir.passes.init_mutable_pass import INIT_BUFFER_KEY
from edgetorch.exir.passes.out_variant import SymOp
from edgetorch.exir.passes.spec_prop import CONTROL_FLOW_OPS, DELEGATE_CALL, MAP, SCAN, TRAINABLE, is_inplace
from edgetorch.exir.tensor import DTYPE_TO_SCALAR, TensorSpec, make_allocation_info, make_tensor_value, spec_leaves
from edgetorch.format.program import (
    BackendDelegate,
    BackendDelegateDataReference,
    BackendDelegateInlineData,
    Bool,
    BoolList,
    Buffer,
    Chain,
    CompileSpec,
    ContainerMetadata,
    DataLocation,
    DelegateCall,
    Double,
    DoubleList,
    EValue,
    ExecutionPlan,
    ExtraTensorInfo,
    Frame,
    FrameList,
    FreeCall,
    Instruction,
    Int,
    IntList,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    NamedData,
    Null,
    Operator,
    OptionalTensorList,
    Program,
    ScalarType,
    String,
    SubsegmentOffsets,
    Tensor,
    TensorDataLocation,
    TensorList,
)  # fmt: skip
from edgetorch.format.ptd import TensorLayout
from edgetorch.format.pte import SegmentView, pack_aligned


class EmitConfigError(InternalError, ValueError):
    """A method cannot be emitted as configured (ExecuTorch raises its ``InternalError`` there)."""


MEMORY_FORMATS = {torch.contiguous_format: 0, torch.preserve_format: 1}
"""The memory formats a program can name (ExecuTorch's kernels take no other); layouts are dim orders."""


STATE_WRITES = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
"""Graph outputs that write state back (emitted as ``copy_`` instructions); a method returns all the others:
user outputs, and for joint graphs the loss, the gradients and the trainable parameters."""


@dataclass(frozen=True)
class Value:
    """An index into the values table (as opposed to a Python constant still to be emitted)."""

    id: int


@dataclass
class ProgramData:
    """Data shared by all methods of one program: constant tensor bytes and delegate blobs, deduplicated.

    ``named_data`` holds what is stored by key: constants kept outside the program and backends' named data.
    """

    constant_alignment: int = 16
    extract_delegates: bool = True
    constants: list[bytes] = field(default_factory=lambda: [b""])
    mutable: list[bytes] = field(default_factory=lambda: [b""])
    delegate_blobs: list[bytes] = field(default_factory=list)
    external: list[bytes] = field(default_factory=list)
    named_data: NamedDataStore = field(default_factory=NamedDataStore)
    _seen: dict[tuple[str, str], int] = field(default_factory=dict)

    def constant(self, data: bytes) -> int:
        """The buffer index of ``data`` in the constant segment (index 0 is reserved)."""
        return self._index("constant", data, self.constants)

    def constant_index(self, data: bytes) -> int | None:
        """The buffer index of a constant whose bytes are ``data``, or None when there is none."""
        return self._seen.get(("constant", hashlib.sha256(data).hexdigest()))

    def initial_state(self, data: bytes) -> int:
        """The buffer index of a mutable buffer's initial bytes in the mutable segment (index 0 is reserved)."""
        return self._index("mutable", data, self.mutable)

    def external_constant(self, tag: str, fqn: str, data: bytes, layout: TensorLayout) -> int:
        """Store a constant under its name in ``<tag>.ptd``; its index among the distinct external constants."""
        self.named_data.add_named_data(fqn, data, self.constant_alignment, tag, layout)
        return self._index("external", data, self.external)

    def delegate(self, blob: bytes) -> BackendDelegateDataReference:
        index = self._index("delegate", blob, self.delegate_blobs)
        location = DataLocation.SEGMENT if self.extract_delegates else DataLocation.INLINE
        return BackendDelegateDataReference(location=location, index=index + int(self.extract_delegates))

    def _index(self, kind: str, data: bytes, table: list[bytes]) -> int:
        key = (kind, hashlib.sha256(data).hexdigest())
        if key not in self._seen:
            self._seen[key] = len(table)
            table.append(data)
        return self._seen[key]

    def constant_segment(self) -> tuple[bytes, list[int]]:
        """The constant segment's bytes and each buffer's offset in it (offset 0 for the reserved buffer)."""
        return pack_aligned(self.constants, self.constant_alignment)  # the reserved buffer is empty: offset 0

    def mutable_segment(self) -> tuple[bytes, list[int]]:
        """Initial states of mutable buffers, packed like the constant segment (copied into arenas at load)."""
        return pack_aligned(self.mutable, self.constant_alignment)

    def inline_delegates(self) -> list[BackendDelegateInlineData]:
        return [] if self.extract_delegates else [BackendDelegateInlineData(b) for b in self.delegate_blobs]


class MethodEmitter:
    """Turns one planned ExportedProgram into an ExecutionPlan named ``name``."""

    def __init__(
        self,
        name: str,
        ep: ExportedProgram | None,
        data: ProgramData,
        emit_stacktrace: bool = False,
        emit_mutable_buffer_names: bool = False,
    ):
        self.name, self.ep, self.data = name, ep, data
        self.emit_stacktrace = emit_stacktrace
        self.emit_mutable_buffer_names = emit_mutable_buffer_names
        self.values: list[EValue] = []
        self.instructions: list[Instruction] = []
        self.operators: list[Operator] = []
        self.delegates: list[BackendDelegate] = []
        # As ExecuTorch's emitter writes them: instruction -> the Edge node's debug handle (a delegate
        # call: the handles of every node it consumed), delegate instruction -> backend and its map.
        self.debug_handle_map: dict[int, int | list[int]] = {}
        self.delegate_map: dict[int, dict[str, Any]] = {}
        self.instruction_id_to_num_outs_map: dict[int, int] = {}
        self.stacktraces: list[FrameList] = []
        self._operator_index: dict[tuple[str, str], int] = {}
        self._spec_ids: dict[int, int] = {}
        self._inputs: list[int] = []
        sig = ep.graph_signature if ep is not None else None
        self._state = {*sig.inputs_to_buffers, *sig.inputs_to_parameters} if sig is not None else set()
        mutated = set(sig.buffers_to_mutate.values()) if sig is not None else set()
        self._mutable = {name for name, fqn in sig.inputs_to_buffers.items() if fqn in mutated} if sig else set()
        self._fqns = (
            {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
            if sig
            else {}
        )

    def emit(self) -> ExecutionPlan:
        gm = self.ep.graph_module
        outputs = self._emit_graph(gm, None)
        kinds = [s.kind for s in self.ep.graph_signature.output_specs]
        user = [o for o, k in zip(outputs, kinds) if k not in STATE_WRITES]
        call_spec = self.ep.call_spec
        return ExecutionPlan(
            name=self.name,
            container_meta_type=ContainerMetadata(
                _container_str(call_spec.in_spec), _container_str(call_spec.out_spec)
            ),
            values=self.values,
            inputs=self._inputs,
            outputs=[self._arg(o, None) for o in user],
            chains=[
                Chain(
                    inputs=[],
                    outputs=[],
                    instructions=self.instructions,
                    stacktrace=self.stacktraces if self.emit_stacktrace else None,
                )
            ],
            operators=self.operators,
            delegates=self.delegates,
            non_const_buffer_sizes=list(gm.meta.get("non_const_buffer_sizes", [0])),
            non_const_buffer_device=gm.meta.get("non_const_buffer_device"),
        )

    def _emit_graph(self, gm: torch.fx.GraphModule, operands: list | None) -> list:
        env: dict[torch.fx.Node, Any] = {}
        placeholders = iter(operands or ())
        for node in gm.graph.nodes:
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
            if node.op == "placeholder":
                env[node] = next(placeholders) if operands is not None else self._placeholder(node)
            elif node.op == "get_attr":
                env[node] = self._attribute(getattr(gm, node.target), node.target)
            elif node.op == "call_function":
                env[node] = self._call(gm, node, args, kwargs)
            elif node.op == "output":
                return list(tree_flatten(args[0])[0])
        raise ValueError(f"graph of method {self.name} has no output node")

    def _attribute(self, attr: Any, name: str) -> Any:
        """A ``get_attr``: tensors (for example constants lifted inside a cond branch) become constant values."""
        if isinstance(attr, torch.Tensor):
            spec = TensorSpec.from_val(attr, name)
            spec.shape, spec.const, spec.storage = tuple(attr.shape), True, attr.detach()
            return self._tensor(spec)
        return attr

    def _value(self, val: Any) -> Value:
        self.values.append(EValue(val))
        return Value(len(self.values) - 1)

    def _tensor(
        self,
        spec: TensorSpec,
        external: tuple[str, str] | None = None,
        name: str | None = None,
        init_state: bool = False,
    ) -> Value:
        if id(spec) not in self._spec_ids:
            self._spec_ids[id(spec)] = self._value(self._tensor_value(spec, external, name, init_state)).id
        return Value(self._spec_ids[id(spec)])

    def _tensor_value(
        self,
        spec: TensorSpec,
        external: tuple[str, str] | None = None,
        name: str | None = None,
        init_state: bool = False,
    ) -> Tensor:
        """The Tensor; ``external`` = (tag, fully qualified name) for data kept in ``<tag>.ptd``, ``name`` the
        fully qualified name written for a mutable buffer, ``init_state`` to write its initial state even
        when all zeros (``InitializedMutableBufferPass``)."""
        planned = spec.mem_id is not None and spec.mem_offset is not None
        extra = None
        if external is None:
            buffer = self._data_buffer(spec, planned, init_state)
            if name is not None:
                extra = ExtraTensorInfo(fully_qualified_name=name, location=TensorDataLocation.SEGMENT)
        else:
            tag, fqn = external
            layout = TensorLayout(spec.scalar_type, list(spec.shape), list(spec.dim_order))
            buffer = self.data.external_constant(tag, fqn, bytes(_tensor_bytes(spec)), layout)
            extra = ExtraTensorInfo(fully_qualified_name=fqn, location=TensorDataLocation.EXTERNAL)
        allocation = make_allocation_info(spec.mem_id, spec.mem_offset) if planned and not spec.const else None
        return make_tensor_value(buffer, allocation, spec, extra)

    def _data_buffer(self, spec: TensorSpec, planned: bool, init_state: bool) -> int:
        """Where the tensor's initial bytes are: a constant, a mutable buffer's initial state (when
        non-zero or asked for), or none."""
        if spec.const:
            return self.data.constant(_tensor_bytes(spec))
        if planned and spec.storage is not None and (init_state or bool(spec.storage.any())):
            return self.data.initial_state(_tensor_bytes(spec))
        return 0

    def _mutable_buffer_name(self, node: torch.fx.Node, spec: TensorSpec) -> str | None:
        """The name a mutable buffer is written with, if asked for; an unplanned one must be named."""
        if node.name not in self._mutable:
            return None
        if self.emit_mutable_buffer_names:
            return self._fqns[node.name]
        if spec.mem_id is None or spec.mem_offset is None:
            raise EmitConfigError(
                f"mutable buffer {self._fqns[node.name]!r} of method {self.name} is not memory planned, so the "
                "runtime could only find it by name; plan it (MemoryPlanningPass(alloc_mutable_buffers=True)) or "
                "write the names: ExecutorchBackendConfig(emit_mutable_buffer_names=True)"
            )
        return None

    def _placeholder(self, node: torch.fx.Node) -> Any:
        spec = node.meta.get("spec")
        val = node.meta.get("val")
        if isinstance(spec, TensorSpec):
            tag = node.meta.get("constant_tag") if spec.const or node.meta.get(TRAINABLE) else None
            value = self._tensor(
                spec,
                None if tag is None else (tag, self._fqns[node.name]),
                self._mutable_buffer_name(node, spec),
                bool(node.meta.get(INIT_BUFFER_KEY)),
            )
        else:  # a specialised scalar input must be passed with the value it was exported with
            value = self._sym_result(node) if isinstance(val, torch.SymInt) else self._constant(val)
        if not (isinstance(spec, TensorSpec) and spec.const) and node.name not in self._state:
            self._inputs.append(value.id)
        return value

    def _call(self, gm: torch.fx.GraphModule, node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        target = to_aten(node.target)
        if target is operator.getitem:
            return args[0][args[1]]
        if target in (memory.alloc, memory.view):
            return self._spec_value(node.meta["spec"])
        if target is memory.free:
            self._append(FreeCall(value_index=self._tensor(args[0]).id), node)
            return None
        if target is MAP:
            return self._map(node, args)
        if target is SCAN:
            return self._scan(node, args)
        if target in CONTROL_FLOW_OPS:
            return self._cond(gm, node, args)
        if target is DELEGATE_CALL:
            return self._delegate(node, args)
        if isinstance(target, SymOp):
            return self._kernel(node, (target.op_name, target.overload), list(args), [self._sym_result(node)])
        if isinstance(target, torch._ops.OpOverload | OutOverload):
            return self._operator(node, target, args, kwargs)
        raise UnsupportedOperatorError(f"node {node.name}: cannot emit a call to {node.target!r}; expected an operator")

    def _spec_value(self, spec: Any) -> Any:
        if isinstance(spec, TensorSpec):
            return self._tensor(spec)
        return [self._spec_value(s) for s in spec]

    def _sym_result(self, node: torch.fx.Node) -> Value:
        val = node.meta.get("val")
        if isinstance(val, (bool, torch.SymBool)):
            return self._value(Bool(False))
        return self._value(Double(0.0) if isinstance(val, (float, torch.SymFloat)) else Int(0))

    def _operator(self, node: torch.fx.Node, op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Any:
        schema = op._schema
        ids, outs, out_ids = [], [], []
        for i, arg in enumerate(schema.arguments):
            if arg.name in kwargs:
                v = kwargs[arg.name]
            elif not arg.kwarg_only and i < len(args):
                v = args[i]
            else:
                v = arg.default_value if arg.has_default_value() else None
            ids.append(self._arg(v, arg.type))
            if arg.is_out:
                outs.append(v)
                out_ids.append(ids[-1])
        if outs:
            result = outs[0] if len(outs) == 1 else outs
            ret = Value(out_ids[0]) if len(outs) == 1 else self._value(TensorList(out_ids))
        elif is_inplace(op):
            result = ret = Value(ids[0])
        elif _returns_scalar(schema):
            result = ret = self._sym_result(node)
        else:
            raise UnsupportedOperatorError(
                f"node {node.name}: {op.name()} is a functional op; run ToOutVarPass before emitting"
            )
        name = schema.name
        self._kernel(node, (name, schema.overload_name), [Value(i) for i in ids], [ret])
        return result

    def _kernel(self, node: torch.fx.Node, key: tuple[str, str], args: list, returns: list) -> Any:
        if key not in self._operator_index:
            self._operator_index[key] = len(self.operators)
            self.operators.append(Operator(name=key[0], overload=key[1]))
        ids = [self._arg(a, None) for a in args] + [r.id for r in returns]
        self._append(KernelCall(op_index=self._operator_index[key], args=ids), node)
        return returns[0] if len(returns) == 1 else returns

    def _append(self, instruction: Any, node: torch.fx.Node | None) -> int:
        self.instructions.append(Instruction(instruction))
        handle = node.meta.get("debug_handle") if node is not None else None
        if handle is not None:
            self.debug_handle_map[len(self.instructions) - 1] = handle
        self.stacktraces.append(_frames(node.meta.get("stack_trace") if node is not None else None))
        return len(self.instructions) - 1

    def _arg(self, v: Any, typ: Any) -> int:
        if isinstance(v, Value):
            return v.id
        if isinstance(typ, torch.OptionalType) and v is not None:
            typ = typ.getElementType()
        if v is None:
            return self._value(_empty_tensor() if isinstance(typ, torch.TensorType) else Null()).id
        if isinstance(v, (list, tuple)):
            return self._list(list(v), typ.getElementType() if isinstance(typ, torch.ListType) else None)
        return self._constant(v).id

    def _list(self, items: list, elem: Any) -> int:
        kind = _list_kind(elem) if elem is not None else _guess_kind(items)
        if kind == "Tensor":
            return self._value(TensorList([self._arg(i, None) for i in items])).id
        if kind == "Tensor?":
            return self._value(OptionalTensorList([-1 if i is None else self._arg(i, None) for i in items])).id
        if kind == "float":
            return self._value(DoubleList([float(i) for i in items])).id
        if kind == "bool":
            return self._value(BoolList([bool(i) for i in items])).id
        return self._value(IntList([self._arg(i, None) for i in items])).id

    def _constant(self, v: Any) -> Value:
        if isinstance(v, bool):
            return self._value(Bool(v))
        if isinstance(v, int):
            return self._value(Int(v))
        if isinstance(v, float):
            return self._value(Double(v))
        if isinstance(v, str):
            return self._value(String(v))
        if isinstance(v, torch.dtype):
            return self._value(Int(int(DTYPE_TO_SCALAR[v])))
        if isinstance(v, torch.memory_format):
            if v not in MEMORY_FORMATS:
                raise EmitConfigError(
                    f"an argument asks for memory format {v}, which a program cannot name (only contiguous and "
                    "preserve); keep dim order on (EdgeCompileConfig(_skip_dim_order=False), the default) so the "
                    "layout is written as a dim order instead"
                )
            return self._value(Int(MEMORY_FORMATS[v]))
        if isinstance(v, torch.layout):
            return self._value(Int(0))
        if v is None:
            return self._value(Null())
        if isinstance(v, (list, tuple)):
            return Value(self._list(list(v), None))
        if isinstance(v, complex):
            raise UnsupportedOperatorError(
                f"method {self.name}: the complex scalar {v!r} cannot be emitted: a .pte value is an Int, Double, "
                "Bool, String or tensor, with no complex scalar; use a complex tensor instead (e.g. "
                "torch.tensor(1j) registered as a buffer)"
            )
        raise UnsupportedOperatorError(f"method {self.name}: cannot emit a constant of type {type(v).__name__}: {v!r}")

    def _cond(self, gm: torch.fx.GraphModule, node: torch.fx.Node, args: tuple) -> list:
        pred, true_fn, false_fn, operands = args
        outputs = [self._tensor(s) for s in spec_leaves(node.meta["spec"])]
        pred_id = self._arg(pred, None)
        to_false = self._append(JumpFalseCall(cond_value_index=pred_id, destination_instruction=-1), None)
        self._branch(true_fn, list(operands), outputs)
        to_end = self._append(
            JumpFalseCall(cond_value_index=self._value(Bool(False)).id, destination_instruction=-1), None
        )
        self.instructions[to_false].instr_args.destination_instruction = len(self.instructions)
        self._branch(false_fn, list(operands), outputs)
        self.instructions[to_end].instr_args.destination_instruction = len(self.instructions)
        return outputs

    def _map(self, node: torch.fx.Node, args: tuple) -> list:
        """``torch.map`` as a loop, as ExecuTorch writes it: the row count (``sym_size``); at the loop's top, row
        ``i`` of the mapped tensor copied into the body's input (``select_copy``); the body; its result stored as
        row ``i`` of the output (``et_copy_index``); ``i += 1`` and back to the top unless ``i == count``; then
        ``i`` back to 0 for the next run."""
        body, mapped, operands = args
        if len(mapped) != 1:
            raise UnsupportedOperatorError(
                f"node {node.name}: torch.map over {len(mapped)} tensors; a program maps over one (stack them "
                "into one tensor first)"
            )
        (out,) = [self._tensor(s) for s in spec_leaves(node.meta["spec"])]
        first = next(n for n in body.graph.nodes if n.op == "placeholder")
        row = self._tensor(first.meta["spec"])
        index, count = self._value(Int(0)), self._value(Int(0))
        self._kernel(node, ("aten::sym_size", "int"), [mapped[0], 0], [count])
        top = len(self.instructions)
        self._kernel(node, ("aten::select_copy", "int_out"), [mapped[0], 0, index, row], [row])
        results = self._emit_graph(body, [row, *[Value(self._arg(o, None)) for o in operands]])
        if len(results) != 1:
            raise UnsupportedOperatorError(
                f"node {node.name}: the mapped function returns {len(results)} values; a program's map returns one"
            )
        self._kernel(node, ("executorch_prim::et_copy_index", "tensor"), [out, results[0], index], [])
        self._loop_back(node, index, count, top)
        return [out]

    def _scan(self, node: torch.fx.Node, args: tuple) -> list:
        """``torch.scan`` as a loop, as ExecuTorch writes it: the carries (the scan's first results) start as
        copies of ``init``; each step copies row ``i`` of every scanned tensor into the combine function's
        inputs, runs it, copies its new carries back (``copy_``: an out= write onto its own input is not safe)
        and stores its other results as row ``i`` of the stacked results (``et_copy_index``)."""
        combine, init, xs, additional = args
        if not xs:
            raise UnsupportedOperatorError(f"node {node.name}: torch.scan over no tensors; give it one to scan")
        results = [self._tensor(s) for s in spec_leaves(node.meta["spec"])]
        carries, stacked = results[: len(init)], results[len(init) :]
        inputs = [n for n in combine.graph.nodes if n.op == "placeholder"]
        rows = [self._tensor(p.meta["spec"]) for p in inputs[len(init) : len(init) + len(xs)]]
        index, count = self._value(Int(0)), self._value(Int(0))
        self._kernel(node, ("aten::sym_size", "int"), [xs[0], 0], [count])
        for start, carry in zip(init, carries):
            self._kernel(node, ("aten::copy_", ""), [carry, start, False], [carry])
        top = len(self.instructions)
        for x, row in zip(xs, rows):
            self._kernel(node, ("aten::select_copy", "int_out"), [x, 0, index, row], [row])
        extra = [Value(self._arg(a, None)) for a in additional]
        outs = self._emit_graph(combine, [*carries, *rows, *extra])
        if len(outs) != len(results):
            raise UnsupportedOperatorError(
                f"node {node.name}: the combine function returns {len(outs)} values; the scan has {len(results)}"
            )
        for new, carry in zip(outs[: len(init)], carries):
            self._kernel(node, ("aten::copy_", ""), [carry, new, False], [carry])
        for y, ys in zip(outs[len(init) :], stacked):
            self._kernel(node, ("executorch_prim::et_copy_index", "tensor"), [ys, y, index], [])
        self._loop_back(node, index, count, top)
        return results

    def _loop_back(self, node: torch.fx.Node, index: Value, count: Value, top: int) -> None:
        """A loop's end: ``index += 1``, back to instruction ``top`` unless ``index == count``, then ``index``
        back to 0 (``index - count``) for the method's next run."""
        self._kernel(node, ("executorch_prim::add", "Scalar"), [index, 1], [index])
        done = self._value(Bool(False))
        self._kernel(node, ("executorch_prim::eq", "Scalar"), [index, count], [done])
        self._append(JumpFalseCall(cond_value_index=done.id, destination_instruction=top), None)
        self._kernel(node, ("executorch_prim::sub", "Scalar"), [index, count], [index])

    def _branch(self, branch: torch.fx.GraphModule, operands: list, outputs: list[Value]) -> None:
        results = self._emit_graph(branch, [Value(self._arg(o, None)) for o in operands])
        for src, dst in zip(results, outputs):
            if src.id != dst.id:
                self._append(MoveCall(move_from=src.id, move_to=dst.id), None)

    def _delegate(self, node: torch.fx.Node, args: tuple) -> Any:
        lowered, inputs = args[0], args[1:]
        named = getattr(lowered, "named_data_store_output", None)
        if named is not None:
            self.data.named_data.merge_named_data_store(named)
        result = self._spec_value(node.meta["spec"])
        outs = result if isinstance(result, list) else [result]
        self.delegates.append(
            BackendDelegate(
                id=lowered.backend_id,
                processed=self.data.delegate(bytes(lowered.processed_bytes)),
                # the lowered module's own CompileSpec objects, as ExecuTorch keeps them (the writer takes any
                # object with the table's fields)
                compile_specs=[
                    c if isinstance(c.value, bytes) else CompileSpec(key=c.key, value=bytes(c.value))
                    for c in lowered.compile_specs
                ],
            )
        )
        ids = [self._arg(a, None) for a in inputs] + [o.id for o in outs]
        pc = self._append(DelegateCall(delegate_index=len(self.delegates) - 1, args=ids), node)
        original = getattr(lowered, "original_module", None)
        nodes = original.graph.nodes if original is not None else ()
        consumed = [n.meta["debug_handle"] for n in nodes if n.op == "call_function" and "debug_handle" in n.meta]
        self.debug_handle_map[pc] = consumed
        self.instruction_id_to_num_outs_map[pc] = len(outs)
        self.delegate_map[pc] = {
            "name": lowered.backend_id,
            "delegate_map": getattr(lowered, "meta", {}).get("debug_handle_map") or {},
        }
        return result


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<name>\S+)\n(?P<context>[^\n]*)')


def _frames(stack_trace: str | None) -> FrameList:
    """A node's recorded Python stack trace as the program's frame list (innermost frame last)."""
    matches = _FRAME.finditer(stack_trace or "")
    return FrameList([Frame(m["file"], int(m["line"]), m["name"], m["context"].strip()) for m in matches])


def _container_str(spec: TreeSpec) -> str:
    """The pytree spec as ExecuTorch stores it; named tuples (``torch.return_types``) are stored as tuples."""
    try:
        return treespec_dumps(spec)
    except NotImplementedError:
        return treespec_dumps(tree_structure(_plain(tree_unflatten([0] * spec.num_leaves, spec))))


def _plain(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _plain(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(map(_plain, tree)) if type(tree) in (list, tuple) else tuple(map(_plain, tree))
    return tree


def _returns_scalar(schema: torch._C.FunctionSchema) -> bool:
    return len(schema.returns) == 1 and str(schema.returns[0].type) in ("int", "SymInt", "float", "bool", "number")


def _list_kind(elem: Any) -> str:
    if isinstance(elem, torch.OptionalType) and isinstance(elem.getElementType(), torch.TensorType):
        return "Tensor?"
    kinds = {torch.TensorType: "Tensor", torch.FloatType: "float", torch.BoolType: "bool"}
    return next((kind for t, kind in kinds.items() if isinstance(elem, t)), "int")


def _guess_kind(items: list) -> str:
    if any(isinstance(i, Value) for i in items) and not any(isinstance(i, int) for i in items):
        return "Tensor"
    if items and all(isinstance(i, bool) for i in items):
        return "bool"
    if any(isinstance(i, float) for i in items):
        return "float"
    return "int"


def _empty_tensor() -> Tensor:
    return Tensor(scalar_type=ScalarType.BYTE, sizes=[0], dim_order=[0])


def _tensor_bytes(spec: TensorSpec) -> memoryview:
    """The constant's bytes laid out in its dim order (row-major over the permuted dims); a view, not a copy."""
    data = spec.storage.detach().cpu().permute(spec.dim_order).contiguous()
    return memoryview(data.reshape(-1).view(torch.uint8).numpy())


def emit_constant_method(name: str, value: Any, data: ProgramData) -> ExecutionPlan:
    """A method with no instructions that returns ``value`` (an int, float, bool, str, tensor or list of them)."""
    emitter = MethodEmitter(name, None, data)
    leaves, spec = tree_flatten(value)
    outputs = [_constant_leaf(emitter, leaf) for leaf in leaves]
    return ExecutionPlan(
        name=name,
        container_meta_type=ContainerMetadata("", treespec_dumps(spec)),
        values=emitter.values,
        inputs=[],
        outputs=outputs,
        chains=[Chain(inputs=[], outputs=[], instructions=[])],
        operators=[],
        delegates=[],
        non_const_buffer_sizes=[0],
    )


def _constant_leaf(emitter: MethodEmitter, leaf: Any) -> int:
    if isinstance(leaf, torch.Tensor):
        spec = TensorSpec.from_val(leaf.contiguous())
        spec.shape, spec.const, spec.storage = tuple(leaf.shape), True, leaf.contiguous()
        return emitter._tensor(spec).id
    return emitter._constant(leaf).id


@dataclass
class EmitterOutput:
    """What :func:`emit_program` makes, ExecuTorch's fields first.

    ``program`` has its data inline (constants in ``constant_buffer`` after the empty placeholder, delegate
    blobs in ``backend_delegate_data``), the initial states of mutable buffers are ``mutable_data``, and the
    constants kept in ``.ptd`` files are ``external_constant_buffer`` (distinct bytes) with, per file tag,
    fqn -> index into it in ``external_constant_map``: ``_serialize.serialize_for_executorch`` writes the files.
    ``debug_handle_map``: method -> instruction -> Edge debug handle(s); ``method_to_delegate_debug_id_map``:
    method -> delegate instruction -> backend and its debug map.
    edgetorch adds the same program as the ``.pte`` writes it (``save_pte(pte_program, segments)``: data moved
    into segments) and ``named_data``, everything stored by key (in the ``.pte`` or, by tag, in ``.ptd`` files).
    """

    program: Program
    debug_handle_map: dict[str, dict[int, int | list[int]]]
    method_to_delegate_debug_id_map: dict[str, dict[int, dict[str, Any]]]
    instruction_id_to_num_outs_map: dict[str, dict[int, int]]
    mutable_data: list[Buffer] | None = None
    external_constant_buffer: list[bytes] = field(default_factory=list)
    external_constant_map: dict[str, dict[str, int]] | None = None
    pte_program: Program | None = None
    segments: list[bytes | SegmentView] = field(default_factory=list)
    named_data: NamedDataStoreOutput | None = None


def external_constants(store: NamedDataStoreOutput) -> tuple[list[bytes], dict[str, dict[str, int]] | None]:
    """The data a store keeps in ``.ptd`` files as ExecuTorch's emitter reports it: the distinct buffers, and
    per tag, fqn -> index into them (None when there are none)."""
    unique: dict[int, int] = {}
    tags: dict[str, dict[str, int]] = {}
    for tag, entries in store.external_data.items():
        for fqn, entry in entries.items():
            tags.setdefault(tag, {})[fqn] = unique.setdefault(entry.buffer_index, len(unique))
    return [bytes(store.buffers[index]) for index in unique], tags or None


def emit_program(
    methods: ExportedProgram | dict[str, ExportedProgram],
    emit_stacktrace: bool = False,
    prim_getters: dict[str, Any] | None = None,
    *,
    constant_tensor_alignment: int | None = None,
    extract_delegate_segments: bool = True,
    share_identical_data: bool = True,
    emit_mutable_buffer_names: bool = False,
) -> EmitterOutput:
    """Emit planned execution-dialect methods (one program is ``forward``) and constant methods into one Program.

    ``prim_getters`` are the constant methods: name -> the value the method returns. The methods must have
    been through ``to_executorch``'s passes (out variants, memory planning), as
    ``ExecutorchProgramManager.exported_program()`` returns them.
    """
    if isinstance(methods, ExportedProgram):
        methods = {"forward": methods}
    data = ProgramData(constant_tensor_alignment or 16, extract_delegate_segments)
    plans, emitters = [], {}
    for name, ep in sorted(methods.items()):  # plans in name order, as ExecuTorch writes them
        emitter = MethodEmitter(name, ep, data, emit_stacktrace, emit_mutable_buffer_names)
        plans.append(emitter.emit())
        emitters[name] = emitter
    plans += [emit_constant_method(name, value, data) for name, value in (prim_getters or {}).items()]
    constants, offsets = data.constant_segment()
    segments: list[bytes | SegmentView] = [constants] + (data.delegate_blobs if extract_delegate_segments else [])
    mutable = None
    if len(data.mutable) > 1:
        initial_states, mutable_offsets = data.mutable_segment()
        mutable = [SubsegmentOffsets(segment_index=len(segments), offsets=mutable_offsets)]
        segments.append(initial_states)
    store = data.named_data.get_named_data_store_output()
    named, first_named_segment = [], {}
    for key, entry in store.pte_data.items():
        if entry.buffer_index not in first_named_segment:
            first_named_segment[entry.buffer_index] = len(segments)
            blob = bytes(store.buffers[entry.buffer_index])
            shared = data.constant_index(blob) if share_identical_data else None
            if shared is not None and offsets[shared] % entry.alignment == 0:
                segments.append(SegmentView(0, offsets[shared], len(blob)))
            else:
                segments.append(blob)
        named.append(NamedData(key=key, segment_index=first_named_segment[entry.buffer_index]))
    pte_program = Program(
        version=0,
        execution_plan=plans,
        constant_buffer=[],
        backend_delegate_data=data.inline_delegates(),
        segments=[],
        constant_segment=SubsegmentOffsets(segment_index=0, offsets=offsets),
        mutable_data_segments=mutable,
        named_data=named or None,
    )
    inline = Program(
        version=0,
        execution_plan=[_inline_delegates(plan) for plan in plans] if extract_delegate_segments else plans,
        constant_buffer=[Buffer(storage=blob) for blob in data.constants],
        backend_delegate_data=[BackendDelegateInlineData(blob) for blob in data.delegate_blobs],
        segments=[],
        constant_segment=SubsegmentOffsets(segment_index=0, offsets=[]),
    )
    external_buffer, external_map = external_constants(store)
    return EmitterOutput(
        program=inline,
        debug_handle_map={name: e.debug_handle_map for name, e in emitters.items()},
        method_to_delegate_debug_id_map={name: e.delegate_map for name, e in emitters.items()},
        instruction_id_to_num_outs_map={name: e.instruction_id_to_num_outs_map for name, e in emitters.items()},
        mutable_data=[Buffer(storage=state) for state in data.mutable] if len(data.mutable) > 1 else None,
        external_constant_buffer=external_buffer,
        external_constant_map=external_map,
        pte_program=pte_program,
        segments=segments,
        named_data=store,
    )


def _inline_delegates(plan: ExecutionPlan) -> ExecutionPlan:
    """``plan`` with its delegates' blobs referred to in ``backend_delegate_data`` instead of segments (the
    first segment holds the constants, so blob ``i`` is segment ``i + 1``); the rest of the plan is shared."""
    delegates = [
        dataclasses.replace(d, processed=BackendDelegateDataReference(DataLocation.INLINE, d.processed.index - 1))
        for d in plan.delegates
    ]
    return dataclasses.replace(plan, delegates=delegates)
