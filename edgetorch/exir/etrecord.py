"""ETRecord: the export-time debug artifact, in ExecuTorch's file layout.

An ETRecord is a zip holding an ``ETRECORD_V0`` marker, the Edge dialect
program of each method (``edge_dialect_exported_program/<method>`` plus its
``_state_dict``, ``_constants`` and ``_example_inputs`` parts, serialized as
ExecuTorch serializes programs, lowered backend modules included: see
:mod:`edgetorch.exir.serde.serialize`), optionally the ATen
``exported_program``, and JSON maps: ``debug_handle_map`` (instruction ->
Edge debug handles), ``delegate_map`` and ``instruction_id_to_num_outs_map``.
Representative inputs and reference outputs are tensors saved with
``torch.save`` and read back with ``torch.load(weights_only=True)``: nothing
in a file can run code when it is read. ExecuTorch's ``parse_etrecord`` and
Inspector read the files written here, and :func:`parse_etrecord` reads
ExecuTorch's. It lives in exir because ``to_edge(..., generate_etrecord=True)``
builds it; ``edgetorch.devtools.etrecord`` exports it under ExecuTorch's names.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from enum import StrEnum
from typing import IO, Any

import torch
from torch.export import ExportedProgram

from edgetorch.errors import EdgetorchError, InvalidArgumentError
from edgetorch.exir import serde


class ETRecordReservedFileNames(StrEnum):
    """The zip entries an ETRecord reserves (ExecuTorch's names); any other entry is an extra recorded program."""

    ETRECORD_IDENTIFIER = "ETRECORD_V0"
    EXPORTED_PROGRAM = "exported_program"
    EXPORT_GRAPH_ID = "export_graph_id"
    EDGE_DIALECT_EXPORTED_PROGRAM = "edge_dialect_exported_program"
    ET_DIALECT_GRAPH_MODULE = "et_dialect_graph_module"
    DEBUG_HANDLE_MAP_NAME = "debug_handle_map"
    DELEGATE_MAP_NAME = "delegate_map"
    INSTRUCTION_ID_TO_NUM_OUTS_MAP_NAME = "instruction_id_to_num_outs_map"
    REFERENCE_OUTPUTS = "reference_outputs"
    REPRESENTATIVE_INPUTS = "representative_inputs"


_NAMES = ETRecordReservedFileNames
_RESERVED = set(_NAMES)
_PARTS = ("_state_dict", "_constants", "_example_inputs")


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

    def add_exported_program(self, exported_program: ExportedProgram | Mapping[str, ExportedProgram] | None) -> None:
        """Record the ATen program (or the ``forward`` entry of a dict of them); None records nothing."""
        if self.exported_program is not None or self.export_graph_id is not None:
            raise ETRecordError(
                "Exported program already exists in the ETRecord; make a new ETRecord to record another one"
            )
        if isinstance(exported_program, Mapping):
            exported_program = exported_program.get("forward")
        if isinstance(exported_program, ExportedProgram):
            self.exported_program = exported_program
            self.export_graph_id = id(exported_program.graph)

    def add_edge_dialect_program(self, edge_dialect_program: Any) -> None:
        """Record the Edge program(s): one ExportedProgram for a single method, a dict method -> program else."""
        if self.edge_dialect_program is not None:
            raise ETRecordError(
                "Edge dialect program already exists in the ETRecord; make a new ETRecord to record another one"
            )
        programs = _edge_programs(edge_dialect_program)
        self.edge_dialect_program = next(iter(programs.values())) if len(programs) == 1 else programs

    def add_executorch_program(self, executorch_program: Any) -> None:
        """Record the instruction maps of an ExecutorchProgramManager, or of a BundledProgram wrapping one
        together with its reference outputs and representative inputs."""
        if any(
            part is not None
            for part in (
                self._debug_handle_map,
                self._delegate_map,
                self._instruction_id_to_num_outs_map,
                self._reference_outputs,
                self._representative_inputs,
            )
        ):
            raise ETRecordError(
                "Executorch program data already exists in the ETRecord; make a new ETRecord to record another one"
            )
        bundled = executorch_program if hasattr(executorch_program, "method_test_suites") else None
        manager = bundled.executorch_program if bundled is not None else executorch_program
        self._debug_handle_map = manager.debug_handle_map
        self._delegate_map = manager.delegate_map
        self._instruction_id_to_num_outs_map = manager.instruction_id_to_num_outs_map
        if bundled is not None:
            self._reference_outputs = _get_reference_outputs(bundled)
            self._representative_inputs = _get_representative_inputs(bundled)

    def add_extra_export_modules(self, modules: Mapping[str, Any]) -> None:
        """Record more programs under ``graph_map`` (``"<name>/<method>"``): torch.export's ExportedProgram
        (as ``<name>/forward``) or to_edge's EdgeProgramManager (every method). A name must not contain a
        reserved name."""
        self.graph_map = self.graph_map if self.graph_map is not None else {}
        for name, module in modules.items():
            if any(reserved in name for reserved in _RESERVED):
                raise ETRecordError(
                    f"The name {name} provided in the extra_recorded_export_modules dict is a reserved name "
                    f"in the ETRecord namespace (it contains one of {sorted(_RESERVED)}); rename it"
                )
            if isinstance(module, ExportedProgram):
                self.graph_map[f"{name}/forward"] = module
            elif _is_edge_manager(module):
                for method in module.methods:
                    self.graph_map[f"{name}/{method}"] = module.exported_program(method)
            else:
                raise ETRecordError(
                    f"Unsupported graph module type. {type(module)}; record an ExportedProgram "
                    "(torch.export) or an EdgeProgramManager (to_edge)"
                )

    def copy(self) -> ETRecord:
        """A new ETRecord with this one's export and Edge programs and none of the executorch program's data
        (what a later stage starts from)."""
        return ETRecord(
            exported_program=self.exported_program,
            export_graph_id=self.export_graph_id,
            edge_dialect_program=self.edge_dialect_program,
            graph_map=self.graph_map,
        )

    def update_representative_inputs(self, inputs: Any) -> None:
        """A list of program inputs, or a BundledProgram (the inputs of its first ``forward`` test case)."""
        if hasattr(inputs, "method_test_suites"):
            self._representative_inputs = _get_representative_inputs(inputs)
        else:
            self._representative_inputs = inputs

    def update_reference_outputs(self, outputs: Any) -> None:
        """A dict method -> list of outputs, a list (for ``forward``) or a BundledProgram (its expected outputs)."""
        if hasattr(outputs, "method_test_suites"):
            self._reference_outputs = _get_reference_outputs(outputs)
        elif isinstance(outputs, list):
            self._reference_outputs = {"forward": outputs}
        else:
            self._reference_outputs = outputs

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
            z.writestr(_NAMES.ETRECORD_IDENTIFIER, "")
            if self.exported_program is not None:
                _write_program(z, _NAMES.EXPORTED_PROGRAM, self.exported_program)
            for method, program in _edge_programs(self.edge_dialect_program).items():
                _write_program(z, f"{_NAMES.EDGE_DIALECT_EXPORTED_PROGRAM}/{method}", program)
            for name, program in (self.graph_map or {}).items():
                _write_program(z, name, program)
            z.writestr(_NAMES.DEBUG_HANDLE_MAP_NAME, json.dumps(self._debug_handle_map))
            z.writestr(_NAMES.DELEGATE_MAP_NAME, json.dumps(self._delegate_map or {}))
            z.writestr(
                _NAMES.INSTRUCTION_ID_TO_NUM_OUTS_MAP_NAME, json.dumps(self._instruction_id_to_num_outs_map or {})
            )
            for name, tensors in (
                (_NAMES.REFERENCE_OUTPUTS, self._reference_outputs),
                (_NAMES.REPRESENTATIVE_INPUTS, self._representative_inputs),
            ):
                if tensors is not None:
                    buf = io.BytesIO()
                    torch.save(tensors, buf)
                    z.writestr(name, buf.getvalue())
            if self.export_graph_id is not None:
                z.writestr(_NAMES.EXPORT_GRAPH_ID, json.dumps(self.export_graph_id))


def _get_reference_outputs(bundled_program: Any) -> dict[str, list]:
    """Method name -> the expected outputs of each of its test cases, from a BundledProgram.

    Every test case must carry expected outputs: an ETRecord's reference outputs are what the
    Inspector compares a run against, so a case without them is an error, not a gap.
    """
    outputs: dict[str, list] = {}
    for suite in bundled_program.method_test_suites:
        outputs[suite.method_name] = []
        for case in suite.test_cases:
            if not case.expected_outputs:
                raise InvalidArgumentError(
                    f"Missing at least one set of expected outputs for method {suite.method_name}; "
                    "give every MethodTestCase expected_outputs (or outputs computed by running the model)"
                )
            outputs[suite.method_name].append(case.expected_outputs)
    return outputs


def _get_representative_inputs(bundled_program: Any) -> list | None:
    """The inputs of the first ``forward`` test case of a BundledProgram; None when it tests no ``forward``."""
    for suite in bundled_program.method_test_suites:
        if suite.method_name == "forward":
            if not suite.test_cases:
                raise InvalidArgumentError(
                    "The 'forward' method is defined, but no corresponding input test cases are provided; "
                    "add a MethodTestCase to its MethodTestSuite"
                )
            return suite.test_cases[0].inputs
    return None


def _is_edge_manager(program: Any) -> bool:
    """An EdgeProgramManager (or one like it): methods and their programs, not yet an executorch program."""
    return hasattr(program, "exported_program") and hasattr(program, "methods") and not hasattr(program, "buffer")


def _edge_programs(program: Any) -> dict[str, ExportedProgram]:
    """Method -> Edge ExportedProgram from an ExportedProgram, a dict, or a manager (EdgeProgramManager)."""
    if isinstance(program, ExportedProgram):
        return {"forward": program}
    if isinstance(program, Mapping):
        return dict(program)
    if _is_edge_manager(program):
        return {m: program.exported_program(m) for m in program.methods}
    raise ETRecordError(
        f"Unsupported type of edge_dialect_program passed in: {type(program).__name__}; "
        "pass the EdgeProgramManager to_edge returned (a copy taken before to_executorch) or an ExportedProgram"
    )


def _write_program(z: zipfile.ZipFile, name: str, program: ExportedProgram) -> None:
    """A program as ExecuTorch serializes it: its JSON under ``name``, its tensors under ``name`` + part."""
    artifact = serde.serialize(program)
    z.writestr(name, artifact.exported_program)
    for part, data in zip(_PARTS, (artifact.state_dict, artifact.constants, artifact.example_inputs)):
        z.writestr(name + part, data)


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
    if _NAMES.ETRECORD_IDENTIFIER not in names:
        raise ETRecordError(
            "ETRecord identifier missing from etrecord file passed in. Either an invalid file was passed in "
            "or the file is corrupt; write it with generate_etrecord or ETRecord.save"
        )
    record = ETRecord(graph_map={}, export_graph_id=0)

    def load_json(name: str) -> Any:
        return json.loads(z.read(name)) if name in names else None

    # The maps stay as JSON gives them (instruction ids as strings), as ExecuTorch's parse_etrecord returns them.
    record._debug_handle_map = load_json(_NAMES.DEBUG_HANDLE_MAP_NAME)
    record._delegate_map = load_json(_NAMES.DELEGATE_MAP_NAME)
    record._instruction_id_to_num_outs_map = load_json(_NAMES.INSTRUCTION_ID_TO_NUM_OUTS_MAP_NAME)
    if _NAMES.EXPORT_GRAPH_ID in names:
        record.export_graph_id = load_json(_NAMES.EXPORT_GRAPH_ID)
    for part in (_NAMES.REFERENCE_OUTPUTS, _NAMES.REPRESENTATIVE_INPUTS):
        if part in names:
            setattr(record, f"_{part}", torch.load(io.BytesIO(z.read(part)), weights_only=True))
    edge_prefix = f"{_NAMES.EDGE_DIALECT_EXPORTED_PROGRAM}/"
    # Older ETRecords hold one Edge program under the bare reserved name.
    loaded = (_NAMES.EXPORTED_PROGRAM, _NAMES.EDGE_DIALECT_EXPORTED_PROGRAM)
    programs = sorted(n for n in names if (n in loaded or n not in _RESERVED) and not n.endswith(_PARTS))
    edge: dict[str, ExportedProgram] = {}
    for name in programs:
        program = _read_program(z, name)
        if name.startswith(edge_prefix):
            edge[name.removeprefix(edge_prefix)] = program
        elif name == _NAMES.EDGE_DIALECT_EXPORTED_PROGRAM:
            record.edge_dialect_program = program
        elif name == _NAMES.EXPORTED_PROGRAM:
            record.exported_program = program
        else:
            record.graph_map[name] = program  # type: ignore[index]
    if edge:
        record.edge_dialect_program = next(iter(edge.values())) if len(edge) == 1 else edge
    return record


def _read_program(z: zipfile.ZipFile, name: str) -> ExportedProgram:
    parts = [z.read(name + p) if name + p in z.namelist() else b"" for p in _PARTS]
    return serde.deserialize(serde.SerializedArtifact(z.read(name), *parts))


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
