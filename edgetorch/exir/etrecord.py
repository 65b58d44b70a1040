"""ETRecord: the export-time debug artifact, in ExecuTorch's file layout.

An ETRecord is a zip holding an ``ETRECORD_V0`` marker, the Edge dialect
program of each method (``edge_dialect_exported_program/<method>`` plus its
``_state_dict``, ``_constants`` and ``_example_inputs`` parts, as torch.export's
serializer writes them, with Edge operators named as ExecuTorch names them:
``executorch.exir.dialects.edge.ops.aten.add.Tensor``), optionally the ATen
``exported_program``, and JSON maps: ``debug_handle_map`` (instruction ->
Edge debug handles), ``delegate_map`` and ``instruction_id_to_num_outs_map``.
Representative inputs and reference outputs are tensors saved with
``torch.save`` and read back with ``torch.load(weights_only=True)``: nothing
in a file can run code when it is read. ExecuTorch's ``parse_etrecord`` and
Inspector read the files written here, and :func:`parse_etrecord` reads
ExecuTorch's. It lives in exir because ``to_edge(..., generate_etrecord=True)``
builds it; ``edgetorch.devtools`` exports it under ExecuTorch's names.
"""

from __future__ import annotations

import copy
import io
import json
import os
import zipfile
from collections.abc import Mapping
from typing import IO, Any

import torch
from torch._export.serde import serialize as torch_serde
from torch.export import ExportedProgram

from edgetorch.errors import EdgetorchError
from edgetorch.exir.dialects import EdgeOpOverload, edge_op
from edgetorch.exir.verification import EdgeVerifier

IDENTIFIER = "ETRECORD_V0"
EXPORTED_PROGRAM = "exported_program"
EDGE_PROGRAM = "edge_dialect_exported_program"
DEBUG_HANDLE_MAP = "debug_handle_map"
DELEGATE_MAP = "delegate_map"
NUM_OUTS_MAP = "instruction_id_to_num_outs_map"
REFERENCE_OUTPUTS = "reference_outputs"
REPRESENTATIVE_INPUTS = "representative_inputs"
EXPORT_GRAPH_ID = "export_graph_id"
_PARTS = ("_state_dict", "_constants", "_example_inputs")
_RESERVED = {IDENTIFIER, EXPORTED_PROGRAM, EDGE_PROGRAM, DEBUG_HANDLE_MAP, DELEGATE_MAP, NUM_OUTS_MAP}
_RESERVED |= {REFERENCE_OUTPUTS, REPRESENTATIVE_INPUTS, EXPORT_GRAPH_ID, "et_dialect_graph_module"}
# How ExecuTorch's serializer names an Edge operator; the rest of the name is namespace.op.overload.
EDGE_TARGET_PREFIX = "executorch.exir.dialects.edge.ops."


class ETRecordError(EdgetorchError, RuntimeError):
    """An ETRecord cannot be written or read (missing parts, not an ETRecord, reserved names)."""


class ETRecord:
    """What the Inspector needs from export time; pass it (or its path) to the Inspector.

    Attributes as ExecuTorch's: ``exported_program``, ``export_graph_id``, ``edge_dialect_program``
    (one program, or a dict method -> program), ``graph_map`` (``"<module>/<method>"`` -> program),
    ``_debug_handle_map``, ``_delegate_map``, ``_instruction_id_to_num_outs_map`` (method -> instruction
    -> ...), ``_reference_outputs`` (method -> list of outputs) and ``_representative_inputs``.
    """

    def __init__(
        self,
        exported_program: ExportedProgram | None = None,
        export_graph_id: int | None = None,
        edge_dialect_program: ExportedProgram | dict[str, ExportedProgram] | None = None,
        graph_map: dict[str, ExportedProgram] | None = None,
        _debug_handle_map: dict | None = None,
        _delegate_map: dict | None = None,
        _instruction_id_to_num_outs_map: dict | None = None,
        _reference_outputs: dict[str, list] | None = None,
        _representative_inputs: list | None = None,
    ):
        self.exported_program = exported_program
        self.export_graph_id = export_graph_id
        self.edge_dialect_program = edge_dialect_program
        self.graph_map = graph_map
        self._debug_handle_map = _debug_handle_map
        self._delegate_map = _delegate_map
        self._instruction_id_to_num_outs_map = _instruction_id_to_num_outs_map
        self._reference_outputs = _reference_outputs
        self._representative_inputs = _representative_inputs

    # ------------------------------------------------------------------ building

    def add_exported_program(self, exported_program: ExportedProgram) -> None:
        if self.exported_program is not None:
            raise ETRecordError("the exported program already exists in the ETRecord; make a new ETRecord")
        self.exported_program = exported_program
        self.export_graph_id = id(exported_program.graph)

    def add_edge_dialect_program(self, edge_dialect_program: Any) -> None:
        if self.edge_dialect_program is not None:
            raise ETRecordError("the edge dialect program already exists in the ETRecord; make a new ETRecord")
        self.edge_dialect_program = _edge_programs(edge_dialect_program)

    def add_executorch_program(self, executorch_program: Any) -> None:
        """Record the instruction maps of an ExecutorchProgramManager (or a BundledProgram wrapping one)."""
        if self._debug_handle_map is not None:
            raise ETRecordError("the executorch program already exists in the ETRecord; make a new ETRecord")
        bundled = executorch_program if hasattr(executorch_program, "method_test_suites") else None
        manager = bundled.executorch_program if bundled is not None else executorch_program
        self._debug_handle_map = manager.debug_handle_map
        self._delegate_map = manager.delegate_map
        self._instruction_id_to_num_outs_map = manager.instruction_id_to_num_outs_map
        if bundled is not None:
            self.update_representative_inputs(bundled)
            self.update_reference_outputs(bundled)

    def add_extra_export_modules(self, modules: Mapping[str, Any]) -> None:
        """Record more programs under ``graph_map`` (``"<name>/<method>"``); names must not be reserved."""
        self.graph_map = self.graph_map or {}
        for name, module in modules.items():
            if name in _RESERVED:
                raise ETRecordError(f"the name {name!r} is a reserved name in the ETRecord namespace; rename it")
            programs = module if isinstance(module, Mapping) else {"forward": _edge_programs(module)["forward"]}
            for method, program in programs.items():
                self.graph_map[f"{name}/{method}"] = program

    def update_representative_inputs(self, inputs: Any) -> None:
        """A list of input tuples, or a BundledProgram (its test inputs for ``forward``)."""
        if hasattr(inputs, "method_test_suites"):
            inputs = [list(case.inputs) for s in inputs.method_test_suites for case in s.test_cases]
        self._representative_inputs = list(inputs)

    def update_reference_outputs(self, outputs: Any) -> None:
        """A dict method -> list of outputs, a list (for ``forward``) or a BundledProgram (its expected outputs)."""
        if hasattr(outputs, "method_test_suites"):
            outputs = {
                s.method_name: [list(case.expected_outputs) for case in s.test_cases]
                for s in outputs.method_test_suites
            }
        elif not isinstance(outputs, Mapping):
            outputs = {"forward": list(outputs)}
        self._reference_outputs = dict(outputs)

    # ------------------------------------------------------------------ saving

    def save(self, path: str | os.PathLike | IO[bytes]) -> None:
        """Write the ETRecord zip; it must hold the Edge program(s) and the executorch program's maps."""
        if not (self.edge_dialect_program and self._debug_handle_map):
            raise ETRecordError(
                "ETRecord must contain edge dialect program and executorch program to be saved; "
                "build it with generate_etrecord(path, edge_manager, executorch_manager) or "
                "to_edge(..., generate_etrecord=True) then to_executorch().get_etrecord()"
            )
        target = os.fspath(path) if isinstance(path, (str, os.PathLike)) else path
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(IDENTIFIER, "")
            if self.exported_program is not None:
                _write_program(z, EXPORTED_PROGRAM, self.exported_program)
            for method, program in _edge_programs(self.edge_dialect_program).items():
                _write_program(z, f"{EDGE_PROGRAM}/{method}", program)
            for name, program in (self.graph_map or {}).items():
                _write_program(z, name, program)
            z.writestr(DEBUG_HANDLE_MAP, json.dumps(self._debug_handle_map))
            z.writestr(DELEGATE_MAP, json.dumps(self._delegate_map or {}))
            z.writestr(NUM_OUTS_MAP, json.dumps(self._instruction_id_to_num_outs_map or {}))
            for name, tensors in (
                (REFERENCE_OUTPUTS, self._reference_outputs),
                (REPRESENTATIVE_INPUTS, self._representative_inputs),
            ):
                if tensors is not None:
                    buf = io.BytesIO()
                    torch.save(tensors, buf)
                    z.writestr(name, buf.getvalue())
            if self.export_graph_id is not None:
                z.writestr(EXPORT_GRAPH_ID, json.dumps(self.export_graph_id))


def _edge_programs(program: Any) -> dict[str, ExportedProgram]:
    """Method -> Edge ExportedProgram from an ExportedProgram, a dict, or a manager (EdgeProgramManager)."""
    if isinstance(program, ExportedProgram):
        return {"forward": program}
    if isinstance(program, Mapping):
        return dict(program)
    if hasattr(program, "exported_program") and hasattr(program, "methods"):
        return {m: program.exported_program(m) for m in sorted(program.methods)}
    raise ETRecordError(
        f"Unsupported type of edge_dialect_program passed in: {type(program).__name__}; "
        "pass the EdgeProgramManager to_edge returned (a copy taken before to_executorch) or an ExportedProgram"
    )


def _write_program(z: zipfile.ZipFile, name: str, program: ExportedProgram) -> None:
    """An ExportedProgram as torch.export's serializer writes it, Edge targets renamed as ExecuTorch names them."""
    program = copy.deepcopy(program)
    handles: dict[str, int] = {}
    edge_nodes: set[str] = set()
    for node in program.graph.nodes:
        if "debug_handle" in node.meta and node.meta["debug_handle"] is not None:
            handles[node.name] = node.meta["debug_handle"]
        if isinstance(node.target, EdgeOpOverload):
            edge_nodes.add(node.name)
            node.target = node.target._op
    artifact = torch_serde.serialize(program)
    doc = json.loads(artifact.exported_program)
    for node in doc["graph_module"]["graph"]["nodes"]:
        if node["name"] in edge_nodes:
            node["target"] = EDGE_TARGET_PREFIX + node["target"].removeprefix("torch.ops.")
        if node["name"] in handles:
            node["metadata"]["debug_handle"] = str(handles[node["name"]])
    z.writestr(name, json.dumps(_as_executorch_schema(doc)))
    for part, data in zip(_PARTS, (artifact.state_dict, artifact.constants, artifact.example_inputs)):
        z.writestr(name + part, data)


# Fields torch.export's serializer added after the schema (5.4) ExecuTorch 1.5 reads programs with; its
# reader rejects unknown fields, so ETRecords leave them out (none carries what the Inspector uses).
_NEWER_FIELDS = {"torch_version", "guards_code", "treespec_namedtuple_fields", "forward_arg_names"}
_NEWER_FIELDS |= {"sym_float_values", "is_hop_single_tensor_return", "kind"}


def _as_executorch_schema(doc: dict) -> dict:
    """The serialized program in the torch.export schema version ExecuTorch's ETRecord reader expects."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in _NEWER_FIELDS}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    doc = strip(doc)
    doc["graph_module"].pop("metadata", None)
    doc.setdefault("dialect", "")
    doc["schema_version"] = {"major": 5, "minor": 4}
    for spec in doc["graph_module"]["signature"]["input_specs"]:
        constant = spec.pop("tensor_constant", None)
        if constant is not None:  # the older schema records a lifted tensor constant as a persistent buffer
            spec["buffer"] = {
                "arg": constant["arg"],
                "buffer_name": constant["tensor_constant_name"],
                "persistent": True,
            }
    return doc


# ---------------------------------------------------------------------- reading


def parse_etrecord(etrecord_path: str | os.PathLike | IO[bytes]) -> ETRecord:
    """Read an ETRecord written by edgetorch or by ExecuTorch; no file content is unpickled or evaluated."""
    try:
        z = zipfile.ZipFile(etrecord_path)
    except Exception:  # zipfile raises BadZipFile, OSError, NotImplementedError, ValueError, EOFError on bad files
        raise ETRecordError("Invalid etrecord file passed in.") from None
    with z:
        try:
            return _parse_zip(z)
        except ETRecordError:
            raise
        except Exception as e:  # zipfile, json and torch.export's deserializer raise many kinds on a corrupt file
            raise ETRecordError(
                f"the ETRecord is corrupt ({type(e).__name__}: {e}); regenerate it with generate_etrecord"
            ) from None


def _parse_zip(z: zipfile.ZipFile) -> ETRecord:
    names = set(z.namelist())
    if IDENTIFIER not in names:
        raise ETRecordError(
            "ETRecord identifier missing from etrecord file passed in. Either an invalid file was passed in "
            "or the file is corrupt; write it with generate_etrecord or ETRecord.save"
        )
    record = ETRecord()

    def load_json(name: str) -> Any:
        return json.loads(z.read(name)) if name in names else None

    record._debug_handle_map = _int_keys(load_json(DEBUG_HANDLE_MAP))
    record._delegate_map = _int_keys(load_json(DELEGATE_MAP))
    record._instruction_id_to_num_outs_map = _int_keys(load_json(NUM_OUTS_MAP))
    record.export_graph_id = load_json(EXPORT_GRAPH_ID)
    for name in (REFERENCE_OUTPUTS, REPRESENTATIVE_INPUTS):
        if name in names:
            tensors = torch.load(io.BytesIO(z.read(name)), weights_only=True)
            setattr(record, f"_{name}", tensors)
    programs = sorted(n for n in names if (n == EXPORTED_PROGRAM or n not in _RESERVED) and not n.endswith(_PARTS))
    edge: dict[str, ExportedProgram] = {}
    for name in programs:
        program = _read_program(z, name)
        if name.startswith(EDGE_PROGRAM + "/"):
            edge[name.removeprefix(EDGE_PROGRAM + "/")] = program
        elif name == EXPORTED_PROGRAM:
            record.exported_program = program
        else:
            record.graph_map = {**(record.graph_map or {}), name: program}
    if edge:
        record.edge_dialect_program = edge["forward"] if list(edge) == ["forward"] else edge
    return record


def _int_keys(maps: Any) -> Any:
    """JSON made the instruction ids strings; make them ints again (method names stay strings)."""
    if not isinstance(maps, dict):
        return maps
    return {m: {int(k) if k.lstrip("-").isdigit() else k: v for k, v in inner.items()} for m, inner in maps.items()}


def _read_program(z: zipfile.ZipFile, name: str) -> ExportedProgram:
    doc = json.loads(z.read(name))
    # ExecuTorch writes with its own copy of an older torch.export schema (5.x); the JSON reads the same.
    version = torch_serde.SCHEMA_VERSION
    doc["schema_version"] = {"major": version[0], "minor": version[1]}
    edge_nodes, handles = set(), {}
    for node in doc["graph_module"]["graph"]["nodes"]:
        if node["target"].startswith(EDGE_TARGET_PREFIX):
            edge_nodes.add(node["name"])
            node["target"] = "torch.ops." + node["target"].removeprefix(EDGE_TARGET_PREFIX)
        handle = node.get("metadata", {}).get("debug_handle")
        if handle is not None:
            handles[node["name"]] = json.loads(handle)
    # Verified once its Edge operators are back (torch would check the ATen stand-ins against the Edge rules).
    edge_dialect = "EDGE" in doc.get("verifiers", ())
    doc["verifiers"] = []
    parts = [z.read(name + p) if name + p in z.namelist() else b"" for p in _PARTS]
    artifact = torch_serde.SerializedArtifact(json.dumps(doc).encode(), *parts)
    program = torch_serde.deserialize(artifact)
    for node in program.graph.nodes:
        if node.name in edge_nodes:
            node.target = edge_op(node.target)
        if node.name in handles:
            node.meta["debug_handle"] = handles[node.name]
    if edge_dialect:
        program._verifiers = [EdgeVerifier]
    return program


def generate_etrecord(
    et_record: str | os.PathLike | IO[bytes],
    edge_dialect_program: Any,
    executorch_program: Any,
    exported_program: ExportedProgram | None = None,
    extra_recorded_export_modules: Mapping[str, Any] | None = None,
) -> None:
    """Write an ETRecord from the Edge program (a copy of to_edge's result), the executorch program manager
    (or a BundledProgram, whose test inputs and expected outputs are recorded too) and optionally the
    exported ATen program, as ExecuTorch's ``generate_etrecord``."""
    record = ETRecord()
    if exported_program is not None:
        record.add_exported_program(exported_program)
    record.add_edge_dialect_program(edge_dialect_program)
    record.add_executorch_program(executorch_program)
    if extra_recorded_export_modules:
        record.add_extra_export_modules(extra_recorded_export_modules)
    record.save(et_record)
