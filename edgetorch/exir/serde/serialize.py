"""Edge programs, delegate calls included, in ExecuTorch's serialized form (``executorch.exir.serde.serialize``).

ExecuTorch writes an ExportedProgram with its own copy of torch.export's serializer (schema 5.4) plus these
additions; its ETRecord files hold programs in this form:

* an Edge operator is named ``executorch.exir.dialects.edge.ops.<namespace>.<op>.<overload>``;
* a node's ``debug_handle`` is kept in its metadata, as a string;
* a symbolic size is sympy's ``str`` of it (``64*s0``), checked before it is read: see :mod:`.symbolic`;
* an ``executorch_call_delegate`` node's first input is named after the lowered module's attribute
  (``lowered_module_0``) and holds the lowered module as a JSON string: ``backend_id``, ``processed_bytes``
  and each compile spec's value in base64, ``original_module`` (the program it was lowered from, in this
  same form), its ``original_state_dict`` and ``original_constants`` (torch.save bytes in base64) and, when
  the backend stored named data, ``named_data_store`` (JSON, buffers in base64). The other inputs are named
  ``delegate_arg_<i>``; a call returning a one-element tuple lists its output as ``as_tensors``.

torch.export's own serializer does the work here (its classes refuse subclasses): a program is serialized
with Edge operators swapped for their ATen ones and lowered modules named, then the JSON is rewritten into
ExecuTorch's form; reading undoes the rewrite before torch's deserializer runs. Tensor parts are read with
``torch.load(weights_only=True)``, so nothing in a file can run code when it is read.
May import torch and edgetorch.exir.
"""

from __future__ import annotations

import base64
import binascii
import copy
import io
import json
from collections.abc import Iterator
from typing import Any

import torch
from torch._export.serde import serialize as torch_serde
from torch._export.serde.schema import ArgumentKind
from torch.export import ExportedProgram

from edgetorch.errors import EdgetorchError
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.delegate import is_delegate_call
from edgetorch.exir.backend.lowered_backend_module import LoweredBackendModule
from edgetorch.exir.dialects import EdgeOpOverload, edge_op
from edgetorch.exir.dialects.shared_library import SHARED_LIBRARIES
from edgetorch.exir.named_data_store import DataEntry, NamedDataStoreOutput
from edgetorch.exir.serde import symbolic
from edgetorch.exir.verification import EdgeVerifier
from edgetorch.format.program import ScalarType
from edgetorch.format.ptd import TensorLayout

__all__ = ["SerializeError", "SerializedArtifact", "deserialize", "serialize"]

SerializedArtifact = torch_serde.SerializedArtifact
# How ExecuTorch's serializer names an Edge operator; the rest of the name is namespace.op.overload.
EDGE_TARGET_PREFIX = "executorch.exir.dialects.edge.ops."
DELEGATE_TARGET = "torch.ops.higher_order.executorch_call_delegate"
# The torch.export schema ExecuTorch 1.5's serializer writes and, by major version, reads.
EXECUTORCH_SCHEMA_VERSION = {"major": 5, "minor": 4}
# Fields torch.export's serializer added after that schema; ExecuTorch's reader rejects unknown fields, so
# they are left out (none carries what ExecuTorch's tools use).
_NEWER_FIELDS = {"torch_version", "guards_code", "treespec_namedtuple_fields", "forward_arg_names"}
_NEWER_FIELDS |= {"sym_float_values", "is_hop_single_tensor_return", "kind"}
_FLOAT_FIELDS = {"as_float", "as_floats"}


class SerializeError(EdgetorchError, RuntimeError):
    """A serialized program cannot be read: malformed JSON, an unknown operator, damaged tensor data."""


def serialize(exported_program: ExportedProgram) -> SerializedArtifact:
    """``exported_program`` (Edge or ATen dialect, lowered modules included) as ExecuTorch serializes it."""
    doc, state_dict, constants, example_inputs = _program_to_json(exported_program)
    return SerializedArtifact(json.dumps(doc).encode(), state_dict, constants, example_inputs)


def deserialize(artifact: SerializedArtifact) -> ExportedProgram:
    """The ExportedProgram of a serialized one, written by ExecuTorch's serializer or by :func:`serialize`."""
    try:
        doc = json.loads(artifact.exported_program)
        return _program_from_json(doc, artifact.state_dict, artifact.constants, artifact.example_inputs)
    except SerializeError:
        raise
    except Exception as e:  # json, base64, torch.load and torch's deserializer raise many kinds on bad input
        raise SerializeError(
            f"the serialized program cannot be read ({type(e).__name__}: {e}); expected a program written by "
            "ExecuTorch's or edgetorch's serializer; serialize the program again"
        ) from None


# ---------------------------------------------------------------------- writing


def _program_to_json(program: ExportedProgram) -> tuple[dict, bytes, bytes, bytes]:
    """The program's JSON document in ExecuTorch's form, and its state dict, constants and example inputs."""
    program = copy.deepcopy(program)
    handles: dict[str, Any] = {}
    edge_nodes: set[str] = set()
    lowered: dict[str, LoweredBackendModule] = {}
    for node in program.graph.nodes:
        if node.meta.get("debug_handle") is not None:
            handles[node.name] = node.meta["debug_handle"]
        if isinstance(node.target, EdgeOpOverload):
            edge_nodes.add(node.name)
            node.target = node.target._op
        elif is_delegate_call(node):
            module = getattr(program.graph_module, node.args[0].target)
            module.module_name = node.args[0].target  # torch's serializer accepts a lowered module by this name
            lowered[node.name] = module
    artifact = torch_serde.serialize(program)
    doc = json.loads(artifact.exported_program)
    for node in doc["graph_module"]["graph"]["nodes"]:
        if node["name"] in edge_nodes:
            node["target"] = EDGE_TARGET_PREFIX + node["target"].removeprefix("torch.ops.")
        if node["name"] in handles:
            node["metadata"]["debug_handle"] = str(handles[node["name"]])
        if node["name"] in lowered:
            _write_delegate_call(node, lowered[node["name"]])
    return _as_executorch_schema(doc), artifact.state_dict, artifact.constants, artifact.example_inputs


def _write_delegate_call(node: dict, module: LoweredBackendModule) -> None:
    """torch's node for a delegate call (its module as ``"<name>-<backend>"``) rewritten as ExecuTorch's."""
    _, *args = node["inputs"]
    lowered = {"name": module.module_name, "arg": {"as_string": json.dumps(_lowered_module_to_json(module))}}
    node["inputs"] = [lowered] + [{"name": f"delegate_arg_{i}", "arg": a["arg"]} for i, a in enumerate(args)]
    outputs = node["outputs"]
    if not node.get("is_hop_single_tensor_return") and len(outputs) == 1 and "as_tensor" in outputs[0]:
        node["outputs"] = [{"as_tensors": [outputs[0]["as_tensor"]]}]


def _lowered_module_to_json(module: LoweredBackendModule) -> dict:
    doc, state_dict, constants, _ = _program_to_json(module.original_module)
    record = {
        "backend_id": module.backend_id,
        "processed_bytes": _b64(module.processed_bytes),
        "compile_specs": [{"key": spec.key, "value": _b64(spec.value)} for spec in module.compile_specs],
        "original_module": doc,
        "original_state_dict": _b64(state_dict),
        "original_constants": _b64(constants),
    }
    store = module.named_data_store_output
    if store is not None:
        record["named_data_store"] = json.dumps(
            {
                "buffers": [_b64(buffer) for buffer in store.buffers],
                "pte_data": _entries_to_json(store.pte_data),
                "external_data": {tag: _entries_to_json(entries) for tag, entries in store.external_data.items()},
            }
        )
    return record


def _entries_to_json(entries: dict[str, DataEntry]) -> dict:
    def layout(t: TensorLayout | None) -> dict | None:
        return None if t is None else {"scalar_type": int(t.scalar_type), "sizes": t.sizes, "dim_order": t.dim_order}

    return {
        key: {"buffer_index": e.buffer_index, "alignment": e.alignment, "tensor_layout": layout(e.tensor_layout)}
        for key, e in entries.items()
    }


def _as_float(value: Any) -> Any:
    """torch writes an infinite or NaN float as the string ``"Infinity"``; ExecuTorch's reader wants the number
    (``json`` writes it as the bare ``Infinity`` token, as ExecuTorch's writer does)."""
    if isinstance(value, list):
        return [_as_float(v) for v in value]
    return float(value) if value in ("Infinity", "-Infinity", "NaN") else value


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _as_executorch_schema(doc: dict) -> dict:
    """The serialized program in the torch.export schema version ExecuTorch's reader expects."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            if "expr_str" in x:
                x = {**x, "expr_str": symbolic.to_executorch_form(x["expr_str"])}
            for key in _FLOAT_FIELDS & x.keys():
                x = {**x, key: _as_float(x[key])}
            return {k: strip(v) for k, v in x.items() if k not in _NEWER_FIELDS}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    doc = strip(doc)
    doc["graph_module"].pop("metadata", None)
    doc.setdefault("dialect", "")
    doc["schema_version"] = dict(EXECUTORCH_SCHEMA_VERSION)
    return doc


# ---------------------------------------------------------------------- reading


def _program_from_json(doc: dict, state_dict: bytes, constants: bytes, example_inputs: bytes) -> ExportedProgram:
    # The older schema's JSON reads the same under the current version.
    version = torch_serde.SCHEMA_VERSION
    doc["schema_version"] = {"major": version[0], "minor": version[1]}
    edge_nodes: set[str] = set()
    handles: dict[str, Any] = {}
    lowered: dict[str, LoweredBackendModule] = {}
    for node in doc["graph_module"]["graph"]["nodes"]:
        if node["target"].startswith(EDGE_TARGET_PREFIX):
            edge_nodes.add(node["name"])
            node["target"] = "torch.ops." + node["target"].removeprefix(EDGE_TARGET_PREFIX)
        elif node["target"] == DELEGATE_TARGET:
            _read_delegate_call(node, lowered)
        library = SHARED_LIBRARIES.get(node["target"].removeprefix("torch.ops.").split(".")[0])
        if library is not None:  # an operator namespace edgetorch defines on first use (dim_order_ops, ...)
            library.ensure_registered()
        handle = node.get("metadata", {}).get("debug_handle")
        if handle is not None:
            handles[node["name"]] = json.loads(handle)
    for expression in _symbolic_expressions(doc):
        symbolic.check(expression)
    # Verified once its Edge operators are back (torch would check the ATen stand-ins against the Edge rules).
    edge_dialect = "EDGE" in doc.get("verifiers", ())
    # The others stay: a TRAINING-dialect program keeps its in-place ops, which the default verifier refuses.
    doc["verifiers"] = [v for v in doc.get("verifiers", ()) if v != "EDGE"]
    tensors = [_load_tensors(part) for part in (state_dict, constants, example_inputs)]
    # torch's deserializer takes the loaded dicts in place of the bytes it would load (and possibly unpickle).
    program = torch_serde.deserialize(SerializedArtifact(json.dumps(doc).encode(), *tensors))  # type: ignore[arg-type]
    graph = program.graph
    for node in list(graph.nodes):
        if node.name in edge_nodes:
            node.target = edge_op(node.target)
        if node.name in handles:
            node.meta["debug_handle"] = handles[node.name]
        if is_delegate_call(node) and isinstance(node.args[0], str):
            name = node.args[0]
            program.graph_module.register_module(name, lowered[name])
            with graph.inserting_before(node):
                node.args = (graph.get_attr(name), *node.args[1:])
    if lowered:
        program.graph_module.recompile()
    if edge_dialect:
        program._verifiers = [EdgeVerifier]
    return program


def _symbolic_expressions(x: Any) -> Iterator[str]:
    """The text of every symbolic expression in a serialized program (delegates' programs excepted)."""
    if isinstance(x, dict):
        if isinstance(x.get("expr_str"), str):
            yield x["expr_str"]
        for value in x.values():
            yield from _symbolic_expressions(value)
    elif isinstance(x, list):
        for value in x:
            yield from _symbolic_expressions(value)


def _read_delegate_call(node: dict, lowered: dict[str, LoweredBackendModule]) -> None:
    """ExecuTorch's delegate call node made readable by torch: the module's name stands in for it."""
    first, *args = node["inputs"]
    name = first["name"]
    if not name.isidentifier() or name.startswith("_"):
        raise SerializeError(f"expected a lowered module's attribute name such as 'lowered_module_0', found {name!r}")
    lowered[name] = _lowered_module_from_json(json.loads(first["arg"]["as_string"]))
    positional = int(ArgumentKind.POSITIONAL)
    node["inputs"] = [
        {"name": "", "arg": a, "kind": positional} for a in ({"as_string": name}, *(a["arg"] for a in args))
    ]
    # ExecuTorch writes a one-tensor tuple as_tensors, so one bare as_tensor is a call returning a tensor.
    node["is_hop_single_tensor_return"] = True


def _lowered_module_from_json(record: dict) -> LoweredBackendModule:
    original = _program_from_json(
        record["original_module"], _unb64(record["original_state_dict"]), _unb64(record["original_constants"]), b""
    )
    specs = [CompileSpec(spec["key"], _unb64(spec["value"])) for spec in record["compile_specs"]]
    store = record.get("named_data_store")
    return LoweredBackendModule(
        original,
        record["backend_id"],
        _unb64(record["processed_bytes"]),
        specs,
        None if store is None else _store_from_json(json.loads(store)),
    )


def _store_from_json(store: dict) -> NamedDataStoreOutput:
    buffers = [_unb64(buffer) for buffer in store["buffers"]]

    def entries(items: dict) -> dict[str, DataEntry]:
        found = {}
        for key, e in items.items():
            if not 0 <= e["buffer_index"] < len(buffers):
                raise SerializeError(
                    f"expected named data {key!r} to index one of {len(buffers)} buffers, found {e['buffer_index']}"
                )
            t = e.get("tensor_layout")
            layout = None if t is None else TensorLayout(ScalarType(t["scalar_type"]), t["sizes"], t["dim_order"])
            found[key] = DataEntry(int(e["buffer_index"]), int(e["alignment"]), layout)
        return found

    return NamedDataStoreOutput(
        buffers,
        entries(store["pte_data"]),
        {tag: entries(items) for tag, items in store.get("external_data", {}).items()},
    )


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise SerializeError(f"expected base64 text in the serialized program, found {text[:40]!r}") from None


def _load_tensors(data: bytes) -> dict | tuple:
    """A torch.save'd dict or tuple of tensors, loaded without running code (empty bytes: an empty dict)."""
    if not data:
        return {}
    loaded = torch.load(io.BytesIO(data), weights_only=True)
    if not isinstance(loaded, (dict, tuple)):
        raise SerializeError(
            f"expected a dict or tuple of tensors saved with torch.save, found {type(loaded).__name__}; "
            "serialize the program again"
        )
    return loaded
