"""ExecuTorch's public import paths resolve with ``executorch`` renamed to ``edgetorch``.

The paths are every dotted ``executorch.…`` name in the feature inventories (``/work/shared/spec/*.md``):
the names written out, each name of a ``from executorch.x import a, b`` statement, and the packages
on the way to them. A path counts only if it resolves on the installed ExecuTorch (checked in a
subprocess, so ExecuTorch's import never touches this process); vendor backends are left out. Every
remaining path must resolve in edgetorch unless :data:`EXCLUDED` gives the reason it does not (the table
is mirrored in docs/compatibility.md, "Public import paths"). :data:`NAMED_PATHS` adds the ``exir``
paths ExecuTorch's own code imports most, which the inventories do not name; they are held to the
same rule but counted apart.

``python tests/test_public_paths.py`` prints how many resolve and which do not.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

SPEC = Path("/work/shared/spec")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"

# Hardware backends: their compilers need vendor SDKs and devices; edgetorch ships XNNPACK.
VENDOR_BACKENDS = (
    "aoti",
    "apple",
    "arm",
    "cadence",
    "cuda",
    "mediatek",
    "mps",
    "nxp",
    "openvino",
    "qualcomm",
    "samsung",
    "vulkan",
)

# path (or path prefix) -> why edgetorch does not provide it. The longest matching prefix decides.
EXCLUDED: dict[str, str] = {}

# exir paths ExecuTorch's own code and tests import most (beyond the inventories), each with a behaviour test
# in tests/exir/.
_EXIR = "executorch.exir."
NAMED_PATHS = tuple(
    _EXIR + path
    for path in (
        "_serialize._cord.Cord",
        "passes.cse_pass.CSEPass",
        "passes.convert_constant_dim_order_pass.convert_constant_dim_order_pass",
        "passes.fold_redundant_qdq_pass.FoldRedundantDequantizeQuantizePass",
        "passes.memory_format_ops_pass.DimOrderOpsRevertPass",
        "passes.memory_format_ops_pass.MemoryFormatOpsPass",
        "passes.normalize_view_copy_base_pass.NormalizeViewCopyBasePass",
        "passes.remove_graph_asserts_pass.RemoveGraphAssertsPass",
        "passes.remove_mixed_type_operators.RemoveMixedTypeOperators",
        "passes.remove_noop_pass.RemoveNoopPass",
        "passes.remove_noop_pass.RemoveToCopyPass",
        "passes.replace_edge_with_backend_pass.EdgeToBackendOpsPass",
        "passes.replace_sym_size_op_pass.ReplaceSymSizeOpPass",
        "passes.sym_to_tensor_pass.SymToTensorPass",
        "passes.propagate_dynamic_shape",
        "passes.propagate_device_pass.PropagateDevicePass",
        "passes.propagate_device_pass.TARGET_DEVICE_COMPILE_SPEC_KEY",
        "passes.propagate_device_config.PropagateDeviceConfig",
        "program._program.lift_constant_tensor_pass",
        "tracer._default_decomposition_table",
        "_serialize._cord.FileBackedData",
        "_serialize._deserialize_pte_binary",
        "_serialize._named_data_store.NamedDataStore",
        "_serialize._serialize_pte_binary",
        "_serialize.data_serializer.DataEntry",
        "_serialize.data_serializer.DataPayload",
        "_serialize.data_serializer.DataSerializer",
        "backend.backend_api.MethodProgramsPartitionerSpec",
        "backend.backend_details.BackendDetails.preprocess_multimethod",
        "backend.canonical_partitioners.all_node_partitioner.AllNodePartitioner",
        "backend.canonical_partitioners.config_partitioner.ConfigerationBasedPartitioner",
        "backend.canonical_partitioners.config_partitioner.PartitionerConfig",
        "backend.canonical_partitioners.config_partitioner.format_target_name",
        "backend.canonical_partitioners.duplicate_constant_node_pass.duplicate_constant_node",
        "backend.canonical_partitioners.duplicate_dequant_node_pass.DuplicateDequantNodePass",
        "backend.canonical_partitioners.pattern_op_partitioner.generate_partitions_from_list_of_nodes",
        "backend.partitioner.Partitioner.spec",
        "backend.utils.get_delegated_payload",
        "backend.utils.get_delegates",
        "backend.utils.get_non_lowered_nodes",
        "backend.utils.is_identical_graph",
        "backend.utils.tag_constant_data",
        "backend.utils.tag_mutated_buffer",
        "capture.CaptureConfig",
        "capture._capture",
        "capture._capture.patch_forward",
        "capture._config.EdgeCompileConfig",
        "capture._config.ExecutorchBackendConfig",
        "debug_handle_utils.DEBUG_HANDLE_KEY",
        "debug_handle_utils.UNSET_DEBUG_HANDLE",
        "debug_handle_utils.get_greatest_ancestor_node_identifier",
        "delegate.executorch_call_delegate",
        "delegate.is_lowered_module",
        "dialects.backend._ops.BackendOpOverload",
        "dialects._ops._DialectNamespace",
        "dialects.edge._ops.AllowedDtypeSet",
        "dialects.edge._ops.EdgeOpOverload",
        "dialects.edge._ops.FunctionDtypeConstraint",
        "dialects.edge._ops._edge_dialect_info",
        "dim_order_utils.get_dim_order",
        "dim_order_utils.get_memory_format",
        "dynamic_shape.DynamicMemoryPlanningMode",
        "emit.emit_program",
        "error.ExportError",
        "error.ExportErrorType",
        "error.InternalError",
        "graph_module._get_submodule",
        "graph_module.bfs_trace_with_node_process",
        "graph_module.get_cond_while_submodules",
        "graph_module.get_control_flow_submodules",
        "lowered_backend_module.arrange_graph_outputs",
        "lowered_backend_module.create_submodule_from_nodes",
        "lowered_backend_module.get_lowered_backend_modules",
        "lowered_backend_module.get_lowered_submodules",
        "memory.free",
        "memory_planning.MemoryAlgoResult",
        "memory_planning.MemoryPlanningAlgorithmSuite",
        "memory_planning.SpecAllocResult",
        "memory_planning.greedy",
        "memory_planning.naive",
        "memory_planning.Verifier",
        "memory_planning.apply_algo",
        "memory_planning.collect_specs_from_nodes",
        "memory_planning.filter_nodes",
        "memory_planning.get_node_tensor_specs",
        "memory_planning.pick_shared_obj",
        "memory_planning.update_all_tensors_lifetime",
        "banked_memory_planning.Bank",
        "banked_memory_planning.BankedGreedy",
        "banked_memory_planning.BankPlacementError",
        "banked_memory_planning.TargetMemoryMap",
        "banked_memory_planning.banked_memory_planning_pass",
        "banked_memory_planning.format_placement_report",
        "pass_base.ExportPassBaseError",
        "pass_base.ExportedProgramPassBase",
        "pass_base.ExportedProgramPassResult",
        "pass_manager.ExportedProgramPassManager",
        "passes.ScalarToTensorPass",
        "passes.constant_prop_pass.constant_prop_pass",
        "passes.DebugPass",
        "passes.ExportPass",
        "passes.dead_code_elimination_pass",
        "passes.debug_handle_generator_pass.DebugHandleGeneratorPass",
        "passes.debug_handle_generator_pass.generate_missing_debug_handles",
        "passes.init_mutable_pass.InitializedMutableBufferPass",
        "passes.insert_write_back_for_buffers_pass.insert_write_back_for_buffers_pass",
        "passes.pass_registry.PassRegistry",
        "passes.prune_empty_tensors_pass.PruneEmptyTensorsPass",
        "passes.reinplace.DEFAULT_INPLACEABLE_OPS",
        "passes.reinplace.reinplace_pass",
        "passes.remove_unused_parameters_pass",
        "passes.replace_aten_with_edge_pass.OpReplacePass",
        "passes.replace_aten_with_edge_pass.aten_to_edge",
        "passes.spec_prop_pass.SpecPropPass",
        "passes.weights_to_outputs_pass",
        "program._program.EdgeProgramManager",
        "program._program._transform",
        "program._program.to_edge",
        "program._program.to_edge_transform_and_lower",
        "scalar_type.ScalarType",
        "verification.arg_validator.EdgeOpArgValidator",
        "verification.verifier.EXIREdgeDialectVerifier",
        "schema.ExecutionPlan",
        "schema.KernelTypes",
        "schema.Program",
        "sym_util.collect_free_symbols",
        "sym_util.eval_shape_upper_bound",
        "sym_util.eval_upper_bound",
        "tensor.TensorSpec",
        "tensor.contiguous_stride_from_shape",
        "tensor.dim_order_from_stride",
        "tensor.make_allocation_info",
        "tensor.make_tensor_value",
        "tensor.stride_from_dim_order",
        "tensor_layout.TensorLayout",
    )
)
# The XNNPACK pass paths ExecuTorch's XNNPACK Tester and pass tests import; behaviour tests in
# tests/backends/xnnpack/test_passes.py and test_partitioner_configs.py.
NAMED_PATHS += tuple(
    "executorch.backends." + path
    for path in (
        "transforms.remove_getitem_op.RemoveGetItemPass",
        "transforms.utils.create_constant_placeholder",
        "transforms.utils.delete_constant_placeholder",
        "xnnpack._passes.XNNPACKPassManager",
        "xnnpack._passes.channels_last_tagged_reshape_pass.ChannelsLastTaggedReshapePass",
        "xnnpack._passes.convert_to_linear.ConvertToLinearPass",
        "xnnpack._passes.fuse_activation_pass.FuseActivationPass",
        "xnnpack._passes.fuse_batch_norm.FuseBatchNormPass",
        "xnnpack._passes.xnnpack_pass.XNNPACKPass",
        "xnnpack.serialization.xnnpack_graph_serialize._HEADER_BYTEORDER",
        "xnnpack.serialization.xnnpack_graph_serialize.XNNHeader",
        "xnnpack.utils.quant_utils.is_dequant",
        "xnnpack.utils.quant_utils.is_quant",
        "xnnpack.utils.quant_utils.is_tagged_as_implicit_q_dq",
        "xnnpack.utils.quant_utils.tag_as_implicit_q_dq",
        "xnnpack.utils.utils.is_param_node",
    )
)
# The Inspector internals ExecuTorch's Inspector tests import; behaviour tests in tests/devtools/test_inspector_utils.py.
NAMED_PATHS += tuple(
    "executorch.devtools.inspector._inspector_utils." + name
    for name in (
        "EDGE_DIALECT_GRAPH_KEY",
        "NodeFilter",
        "calculate_cosine_similarity",
        "calculate_mse",
        "calculate_snr",
        "create_debug_handle_to_op_node_mapping",
        "find_op_names",
        "find_populated_event",
        "gen_graphs_from_etrecord",
        "get_aot_debug_handle_to_op_name_mapping",
        "map_runtime_aot_intermediate_outputs",
        "merge_runtime_overlapping_debug_handles",
        "propagate_back_debug_handle",
    )
)
# The rest of the Inspector's internals ExecuTorch's Inspector tests import; behaviour tests in
# tests/devtools/test_event_blocks.py and test_inspector.py.
NAMED_PATHS += tuple(
    "executorch.devtools.inspector." + path
    for path in (
        "_inspector.DebugEventSignature",
        "_inspector.DelegateMetadata",
        "_inspector.EventSignature",
        "_inspector.InstructionEvent",
        "_inspector.InstructionEventSignature",
        "_inspector.ProfileEventSignature",
        "_inspector.RunSignature",
        "_intermediate_output_capturer.IntermediateOutputCapturer",
        "numerical_comparator.numerical_comparator_base.NumericalComparatorBase",
        "numerical_comparator.l1_numerical_comparator.L1Comparator",
        "numerical_comparator.mse_numerical_comparator.MSEComparator",
        "numerical_comparator.snr_numerical_comparator.SNRComparator",
    )
)

_IDENT = r"[A-Za-z_]\w*"
_PATH = re.compile(rf"\bexecutorch(?:\.{_IDENT})+")
_FROM = re.compile(
    rf"\bfrom\s+(executorch(?:\.{_IDENT})*)\s+import\s+(\([^)]*\)|{_IDENT}(?:\s+as\s+{_IDENT})?(?:\s*,\s*{_IDENT}(?:\s+as\s+{_IDENT})?)*)"
)


def spec_paths(text: str) -> list[str]:
    """Every ``executorch.…`` path ``text`` names, with the packages on the way to each, vendor backends left out."""
    named = set(_PATH.findall(text))
    for module, names in _FROM.findall(text):
        named.update(f"{module}.{item.split()[0]}" for item in names.strip("()").split(",") if item.strip())
    paths = set()
    for path in named:
        parts = path.split(".")
        paths.update(".".join(parts[:end]) for end in range(2, len(parts) + 1))
    return sorted(p for p in paths if not _is_vendor(p))


def _is_vendor(path: str) -> bool:
    parts = path.split(".")
    return len(parts) > 2 and parts[1] == "backends" and parts[2] in VENDOR_BACKENDS


def why_unresolved(path: str) -> str | None:
    """None if ``path`` (a module, or attributes of one) resolves in this process, else what went wrong."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        module_name = ".".join(parts[:end])
        try:
            obj = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                continue  # this prefix is not a module; try the one above it
            return f"importing {module_name} failed: {error}"
        except Exception as error:  # a module that raises on import does not resolve, whatever it raises
            return f"importing {module_name} failed: {type(error).__name__}: {error}"
        for depth, attribute in enumerate(parts[end:], start=end):
            if not hasattr(obj, attribute):
                return f"{'.'.join(parts[:depth])} has no attribute {attribute!r}"
            obj = getattr(obj, attribute)
        return None
    return f"no module {parts[0]}"


def excluded_reason(path: str) -> str | None:
    matches = [p for p in EXCLUDED if path == p or path.startswith(p + ".")]
    return EXCLUDED[max(matches, key=len)] if matches else None


def as_edgetorch(path: str) -> str:
    return "edgetorch" + path[len("executorch") :]


def _spec_text() -> str:
    return "\n".join(page.read_text(encoding="utf-8") for page in sorted(SPEC.glob("*.md")))


@cache
def executorch_paths() -> frozenset[str]:
    """The spec's paths and :data:`NAMED_PATHS` that resolve on the installed ExecuTorch, checked in a child
    process."""
    candidates = sorted({*spec_paths(_spec_text()), *NAMED_PATHS})
    child = subprocess.run(
        [sys.executable, __file__, "--resolving"],
        input="\n".join(candidates),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return frozenset(line for line in child.stdout.splitlines() if line in candidates)


pytestmark = [
    pytest.mark.skipif(not SPEC.is_dir(), reason=f"the ExecuTorch feature inventories are not at {SPEC}"),
    pytest.mark.skipif(importlib.util.find_spec("executorch") is None, reason="executorch is not installed"),
]

CANDIDATES = sorted({*spec_paths(_spec_text()), *NAMED_PATHS}) if SPEC.is_dir() else []


def test_extraction_finds_written_paths_imported_names_and_their_packages():
    text = (
        "call `executorch.exir.memory.alloc(spec)`; "
        "from executorch.devtools import Inspector, generate_etrecord as g; "
        "`executorch.backends.qualcomm.utils.utils`"
    )
    assert spec_paths(text) == [
        "executorch.backends",
        "executorch.devtools",
        "executorch.devtools.Inspector",
        "executorch.devtools.generate_etrecord",
        "executorch.exir",
        "executorch.exir.memory",
        "executorch.exir.memory.alloc",
    ]


def test_why_unresolved_tells_a_missing_module_from_a_missing_attribute():
    assert why_unresolved("edgetorch.exir.to_edge") is None
    assert why_unresolved("edgetorch.exir.no_such_name") == "edgetorch.exir has no attribute 'no_such_name'"
    assert why_unresolved("edgetorch.no_such_package.thing") == "edgetorch has no attribute 'no_such_package'"


def test_the_spec_names_enough_executorch_paths():
    assert len(executorch_paths()) >= 80
    assert "executorch.exir.to_edge" in executorch_paths()


@pytest.mark.parametrize("path", CANDIDATES)
def test_public_path_resolves_in_edgetorch(path):
    if path not in executorch_paths():
        pytest.skip(f"{path} does not resolve on the installed executorch")
    reason = excluded_reason(path)
    if reason is not None:
        pytest.skip(f"excluded: {reason}")
    assert why_unresolved(as_edgetorch(path)) is None


def test_every_exclusion_is_mirrored_in_the_docs():
    docs = DOCS.read_text(encoding="utf-8")
    assert [path for path in EXCLUDED if f"`{path}`" not in docs] == []


def report() -> str:
    """How many paths resolve, of the inventories' and of NAMED_PATHS, and which do not."""
    lines = []
    found = executorch_paths()
    for source, paths in [
        ("ExecuTorch public paths (the inventories)", sorted(found & set(spec_paths(_spec_text())))),
        ("exir paths ExecuTorch's code imports (NAMED_PATHS)", sorted(found & set(NAMED_PATHS))),
    ]:
        excluded = [p for p in paths if excluded_reason(p) is not None]
        missing = {p: why for p in paths if excluded_reason(p) is None and (why := why_unresolved(as_edgetorch(p)))}
        lines.append(
            f"{len(paths) - len(excluded) - len(missing)} of {len(paths)} {source} resolve with the edgetorch. "
            f"prefix ({len(excluded)} excluded, {len(missing)} missing)"
        )
        lines += [f"  missing  {as_edgetorch(p)}: {why}" for p, why in missing.items()]
        lines += [f"  excluded {as_edgetorch(p)}: {excluded_reason(p)}" for p in excluded]
    return "\n".join(lines)


if __name__ == "__main__":
    # Run as a script, sys.path starts at tests/: put this checkout first, so that its edgetorch is measured.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    if sys.argv[1:] == ["--resolving"]:  # the child of executorch_paths(): echo the paths that resolve here
        print("\n".join(p for p in sys.stdin.read().split() if why_unresolved(p) is None))
    else:
        print(report())
