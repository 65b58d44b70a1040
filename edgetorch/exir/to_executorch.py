"""``to_executorch``: Edge programs -> execution dialect -> memory plan -> ``.pte`` bytes.

Per method, in order: buffer write-back, spec propagation, the user's passes,
symbolic shape evaluation, out-variant conversion, memory planning (always
last), then emission of all methods (and constant methods) into one Program.
Data stored by key goes into the ``.pte``'s named data or, for external tags,
into ``<tag>.ptd`` files (``write_tensor_data_to_file``). May import torch.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TextIO

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import OutputKind
from torch.fx.passes.infra.pass_base import PassBase

from edgetorch.exir.dynamic_shape import DynamicMemoryPlanningMode
from edgetorch.exir.emit import EmitterOutput, emit_program, external_constants
from edgetorch.exir.memory_planning import MemoryPlan
from edgetorch.exir.pass_base import PassManager
from edgetorch.exir.passes.constant_prop_pass import constant_prop_pass
from edgetorch.exir.passes.external_constants_pass import DEFAULT_EXTERNAL_TAG, external_constants_pass
from edgetorch.exir.passes.memory_planning_pass import MemoryPlanningPass
from edgetorch.exir.passes.out_variant import ToOutVarPass, insert_buffer_write_back
from edgetorch.exir.passes.propagate_device_config import PropagateDeviceConfig
from edgetorch.exir.passes.propagate_device_pass import PropagateDevicePass
from edgetorch.exir.passes.reinplace import DEFAULT_INPLACEABLE_OPS, reinplace_pass
from edgetorch.exir.passes.replace_view_copy_with_view_pass import ReplaceViewCopyWithViewPass
from edgetorch.exir.passes.spec_prop import TRAINABLE, SpecPropPass, mark_constants
from edgetorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass, HintBasedSymShapeEvalPass
from edgetorch.exir.passes.weights_to_outputs import training_metadata, weights_to_outputs
from edgetorch.exir.tensor import SCALAR_TO_DTYPE
from edgetorch.format.program import Program, Tensor, TensorDataLocation
from edgetorch.format.ptd import save_ptd
from edgetorch.format.pte import SEGMENT_ALIGNMENT, save_pte


@dataclass
class ExecutorchBackendConfig:
    """How ``to_executorch`` lowers and serializes; per-method dicts are allowed where noted."""

    passes: list = field(default_factory=list)
    """Passes run on every method first, as in ExecuTorch (before spec propagation and out-variant conversion);
    a pass that returns a ``PassResult`` hands on its ``graph_module``."""
    memory_planning_pass: Any = field(default_factory=MemoryPlanningPass)
    """A MemoryPlanningPass, or a dict of them by method name."""
    to_out_var_pass: PassBase = field(default_factory=ToOutVarPass)
    sym_shape_eval_pass: Any = None
    """How symbolic sizes become planned sizes; a pass or a dict by method name. None: the pass
    ``dynamic_memory_planning_mode`` names."""
    dynamic_memory_planning_mode: DynamicMemoryPlanningMode = DynamicMemoryPlanningMode.UPPER_BOUND
    """Where a dynamic dimension is planned when ``sym_shape_eval_pass`` is None: at the upper bound of its
    range (``UPPER_BOUND``: every allowed size runs), or at the example input's size (``SYMBOLIC``: the
    smallest plan; the method refuses larger inputs)."""
    extract_delegate_segments: bool = True
    """Put delegate blobs in segments after the flatbuffer (True) or inline in it (False)."""
    segment_alignment: int = SEGMENT_ALIGNMENT
    constant_tensor_alignment: int | None = None
    """Alignment of each constant inside the constant segment (default 16)."""
    remove_view_copy: bool = True
    """Emit static reshapes of computed tensors as aliases of their base instead of copy kernels."""
    emit_stacktrace: bool = False
    """Store each instruction's Python stack trace in the program (for debugging tools)."""
    delegate_alignment: int | None = None
    """Alignment the delegate blobs need; segments are aligned to ``segment_alignment``, which must be a multiple."""
    run_reinplace_pass: bool = False
    """Write mutable buffers updated by ``index_put`` in place (``index_put_``, no copy and no write-back)
    when nothing reads their old value afterwards: an LLM's KV caches (see ``passes.reinplace``)."""
    reinplace_extra_ops: frozenset[Any] | None = None
    """More functional edge ops to rewrite in place when safe (``ops.edge.aten.add.Tensor`` -> ``add_``);
    setting it runs the re-inplace pass too."""
    external_constants: bool | Callable[[torch.fx.Node], str | None] = False
    """Keep constants (weights) out of the ``.pte``: True puts all of them in ``_default_external_constant.ptd``;
    a function of the placeholder node names the file (without ``.ptd``) per constant, None keeping it inside.
    Constants a backend took into its delegate follow that backend's own rule (see ``passes.external_constants_pass``)."""

    external_mutable_weights: bool = False
    """Keep the initial values of a training program's trainable weights out of the ``.pte``, in
    ``_default_external_constant.ptd``; the runtime copies them into planned memory at load."""
    emit_mutable_buffer_names: bool = False
    """Write each mutable buffer's fully qualified name into the program (needed when it is not memory planned)."""
    do_quant_fusion_and_const_prop: bool = False
    """Before lowering, compute the constant parts of each method ahead of time (``constant_prop_pass``).
    ExecuTorch also fuses dequantize -> op -> quantize patterns into fused quantized kernels at this point;
    edgetorch does not (those ops stay separate kernels). Refused for training programs."""

    enable_non_cpu_memory_planning: bool = False
    """Plan the tensors a device delegate (one whose partitioner names a ``target_device``) reads and writes in
    arenas of that device, with explicit host/device copies at its edges (see ``PropagateDevicePass``). Off:
    those tensors are only marked with their device and planned in host memory."""
    propagate_device_config: PropagateDeviceConfig | dict[str, PropagateDeviceConfig] = field(
        default_factory=PropagateDeviceConfig
    )
    """Which host/device copies of method inputs and outputs to leave out, for all methods or by method name."""

    share_identical_data: bool = True
    """Store a backend's named data whose bytes equal a constant's once: its segment is that constant's range
    inside the constant segment (e.g. a tied embedding table quantized like the delegated output projection)."""

    def shape_eval_pass(self, method: str) -> Any:
        """The pass that gives ``method``'s symbolic sizes their planned values."""
        if self.sym_shape_eval_pass is not None:
            return _for_method(self.sym_shape_eval_pass, method)
        if self.dynamic_memory_planning_mode == DynamicMemoryPlanningMode.SYMBOLIC:
            return HintBasedSymShapeEvalPass()
        return ConstraintBasedSymShapeEvalPass()

    def __post_init__(self) -> None:
        self.dynamic_memory_planning_mode = DynamicMemoryPlanningMode(self.dynamic_memory_planning_mode)
        for name in ("segment_alignment", "constant_tensor_alignment", "delegate_alignment"):
            value = getattr(self, name)
            if value is not None and (value <= 0 or value & (value - 1)):
                raise ValueError(f"{name} must be a power of two, found {value}")
        if self.delegate_alignment is not None and self.delegate_alignment > self.segment_alignment:
            raise ValueError(
                f"delegate_alignment {self.delegate_alignment} exceeds segment_alignment {self.segment_alignment}; "
                "raise segment_alignment to at least the delegate alignment"
            )


class ExecutorchProgramManager:
    """The result of ``to_executorch``: execution-dialect programs per method and the ``.pte`` bytes."""

    def __init__(
        self,
        edge_programs: dict[str, ExportedProgram] | ExportedProgram,
        constant_methods: dict[str, object] | None = None,
        config: ExecutorchBackendConfig | None = None,
    ):
        if isinstance(edge_programs, ExportedProgram):
            edge_programs = {"forward": edge_programs}
        self._config = config or ExecutorchBackendConfig()
        self._constant_methods = dict(constant_methods or {})
        self.memory_plans: dict[str, MemoryPlan] = {}
        self._programs = {name: self._lower(name, ep) for name, ep in edge_programs.items()}
        emitted = self._emit()
        self._program, self._segments, self._external_data = emitted.pte_program, emitted.segments, emitted.named_data
        self._inline_program = emitted.program  # the same plans; constants are views of the programs' tensors
        self.debug_handle_map = emitted.debug_handle_map
        self.delegate_map = emitted.method_to_delegate_debug_id_map
        self.instruction_id_to_num_outs_map = emitted.instruction_id_to_num_outs_map
        self._buffer: bytes | None = None
        self._etrecord: Any = None
        self._data_files: dict[str, bytes] | None = None

    @property
    def methods(self) -> set[str]:
        return set(self._programs)

    def get_etrecord(self) -> Any:
        """The ETRecord of ``to_edge(..., generate_etrecord=True)``, with this program's instruction maps."""
        if self._etrecord is None:
            raise RuntimeError("ETRecord was not generated; pass generate_etrecord=True to to_edge")
        return self._etrecord

    @property
    def _emitter_output(self) -> EmitterOutput:
        """The emitted program as ExecuTorch's emitter hands it over: data inline, not yet in segments."""
        from edgetorch.exir._serialize._program import deserialize_pte_binary

        pte = deserialize_pte_binary(self.buffer)
        _trim_constants(pte.program)
        external_buffer, external_map = external_constants(self._external_data)
        return EmitterOutput(
            program=pte.program,
            debug_handle_map=self.debug_handle_map,
            method_to_delegate_debug_id_map=self.delegate_map,
            instruction_id_to_num_outs_map=self.instruction_id_to_num_outs_map,
            mutable_data=pte.mutable_data,
            external_constant_buffer=external_buffer,
            external_constant_map=external_map,
        )

    @property
    def config_methods(self) -> set[str]:
        return set(self._constant_methods)

    @property
    def executorch_program(self) -> Program:
        """The Program before serialization, as ExecuTorch's emitter gives it: data inline (constants in
        ``constant_buffer``, delegate blobs in ``backend_delegate_data``), so that
        ``_serialize_pte_binary(PTEFile(program))`` writes it."""
        return self._inline_program

    def exported_program(self, method_name: str = "forward") -> ExportedProgram:
        """The planned execution-dialect program of ``method_name`` (alloc nodes and out-variant calls)."""
        return self._programs[method_name]

    @property
    def buffer(self) -> bytes:
        """The ``.pte`` file's bytes (built once)."""
        if self._buffer is None:
            # No extended header when the segments hold no bytes, as ExecuTorch writes such a program.
            self._buffer = save_pte(
                self._program, self._segments, self._config.segment_alignment, header_without_data=False
            )
        return self._buffer

    def dump_executorch_program(self, verbose: bool = False, out: TextIO | None = None) -> None:
        """Print the program: its instructions in a short notation, or with ``verbose`` every schema field."""
        from edgetorch.exir.print_program import pretty_print, print_program

        if verbose:
            pretty_print(self._program, out=out)
        else:
            print_program(self._program, out=out)

    @property
    def data_files(self) -> dict[str, bytes]:
        """The ``.ptd`` files the program needs at load time, by name without ``.ptd`` (empty if none)."""
        if self._data_files is None:
            store = self._external_data
            self._data_files = {
                tag: save_ptd(
                    {key: (bytes(store.buffers[e.buffer_index]), e.tensor_layout) for key, e in entries.items()},
                    self._config.segment_alignment,
                )
                for tag, entries in store.external_data.items()
            }
        return self._data_files

    @property
    def _tensor_data(self) -> dict[str, bytes]:
        """ExecuTorch's private name for :attr:`data_files` (the same dict), which its tests read."""
        return self.data_files

    def write_to_file(self, open_file: BinaryIO) -> None:
        open_file.write(self.buffer)

    def write_tensor_data_to_file(self, outdir: str | os.PathLike) -> None:
        """Write each data file as ``<outdir>/<name>.ptd``; load them with the program (``data_files=``)."""
        for name, data in self.data_files.items():
            with open(os.path.join(outdir, f"{name}.ptd"), "wb") as f:
                f.write(data)

    def save(self, path: str | os.PathLike) -> None:
        """Write the program to ``path``, which must end in ``.pte``."""
        if not str(path).endswith(".pte"):
            raise ValueError(f"expected a path ending in .pte, found {str(path)!r}")
        with open(path, "wb") as f:
            self.write_to_file(f)

    def _lower(self, name: str, edge_program: ExportedProgram) -> ExportedProgram:
        # The graph is copied; weights are shared, since no pass here changes a tensor's data (GPT-2: -1 s).
        shared = {id(t): t for t in [*edge_program.state_dict.values(), *edge_program.constants.values()]}
        ep = copy.deepcopy(edge_program, memo=shared)
        if self._config.do_quant_fusion_and_const_prop:
            ep = _fuse_and_fold(name, ep)
        weights_to_outputs(ep)
        if self._config.run_reinplace_pass or self._config.reinplace_extra_ops:
            reinplace_pass(ep, DEFAULT_INPLACEABLE_OPS | (self._config.reinplace_extra_ops or frozenset()))
        insert_buffer_write_back(ep)
        if self._config.passes:
            _adopt(ep.graph_module, PassManager(self._config.passes)(ep.graph_module).graph_module)
        gm = ep.graph_module
        SpecPropPass()(gm)
        self._propagate_devices(name, gm)
        mark_constants(ep)
        if self._config.external_constants:
            tag_fn = None if self._config.external_constants is True else self._config.external_constants
            external_constants_pass(ep, tag_fn)
        if self._config.external_mutable_weights:
            for node in ep.graph.nodes:
                if node.meta.get(TRAINABLE):
                    node.meta["constant_tag"] = DEFAULT_EXTERNAL_TAG
        if self._config.remove_view_copy:
            ReplaceViewCopyWithViewPass()(gm)
        self._config.shape_eval_pass(name)(gm)
        self._config.to_out_var_pass(gm)
        planner = _for_method(self._config.memory_planning_pass, name)
        if hasattr(planner, "enable_non_cpu_memory_planning"):
            planner.enable_non_cpu_memory_planning = self._config.enable_non_cpu_memory_planning
        planner.run(gm, ep.graph_signature)
        self.memory_plans[name] = planner.plan
        return ep

    def _propagate_devices(self, name: str, gm: torch.fx.GraphModule) -> None:
        config = self._config.propagate_device_config
        if isinstance(config, dict):
            config = config.get(name, PropagateDeviceConfig())
        skip_inputs, skip_outputs = config.for_method(name)
        PropagateDevicePass(skip_inputs, skip_outputs, self._config.enable_non_cpu_memory_planning)(gm)

    def _emit(self) -> EmitterOutput:
        config = self._config
        return emit_program(
            self._programs,
            config.emit_stacktrace,
            {**training_metadata(self._programs), **self._constant_methods},
            constant_tensor_alignment=config.constant_tensor_alignment,
            extract_delegate_segments=config.extract_delegate_segments,
            share_identical_data=config.share_identical_data,
            emit_mutable_buffer_names=config.emit_mutable_buffer_names,
        )


def _trim_constants(program: Program) -> None:
    """Cut each constant buffer read back from the constant segment (which holds the alignment padding
    up to the next constant) to the bytes of the tensor using it."""
    for plan in program.execution_plan:
        for value in plan.values:
            tensor = value.val
            external = tensor.extra_tensor_info if isinstance(tensor, Tensor) else None
            if external is not None and external.location == TensorDataLocation.EXTERNAL:
                continue  # its data_buffer_idx counts the .ptd's constants
            if isinstance(tensor, Tensor) and tensor.data_buffer_idx > 0 and tensor.allocation_info is None:
                nbytes = math.prod(tensor.sizes) * SCALAR_TO_DTYPE[tensor.scalar_type].itemsize
                buffer = program.constant_buffer[tensor.data_buffer_idx]
                buffer.storage = bytes(buffer.storage[:nbytes])


def _fuse_and_fold(name: str, ep: ExportedProgram) -> ExportedProgram:
    """``do_quant_fusion_and_const_prop``: the method with its constant parts computed."""
    if any(s.kind == OutputKind.GRADIENT_TO_PARAMETER for s in ep.graph_signature.output_specs):
        raise ValueError(
            f"method {name} computes gradients (a training program); do_quant_fusion_and_const_prop would fold "
            "its trainable weights into constants. Set do_quant_fusion_and_const_prop=False for it"
        )
    return constant_prop_pass(ep)


def _adopt(target: torch.fx.GraphModule, source: torch.fx.GraphModule) -> None:
    """Make ``target`` (the graph module an ExportedProgram owns) hold the graph a pass returned in ``source``."""
    if source is target:
        return
    target.meta.update(source.meta)
    target.graph = source.graph
    for name, _ in list(target.named_children()):
        delattr(target, name)
    for name, module in source.named_children():
        setattr(target, name, module)
    for node in source.graph.nodes:
        if node.op == "get_attr" and isinstance(getattr(source, node.target, None), torch.Tensor):
            setattr(target, node.target, getattr(source, node.target))
    target.recompile()


def _for_method(option: Any, name: str) -> Any:
    """A per-method option's value for ``name`` (dict options must name every method)."""
    if isinstance(option, dict):
        if name not in option:
            raise KeyError(f"no entry for method {name!r} in per-method option; it has {sorted(option)}")
        return option[name]
    return option
