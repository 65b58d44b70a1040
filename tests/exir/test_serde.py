"""edgetorch.exir.serde: delegated Edge programs in ExecuTorch's serialized form, and hostile input refused with a
typed error before anything in it is evaluated or unpickled."""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import zipfile

import pytest
import torch

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.devtools import generate_etrecord, parse_etrecord
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.exir.etrecord import ETRecordError
from edgetorch.exir.serde import SerializedArtifact, SerializeError, deserialize, serialize, symbolic
from tests.interop.etrecord_worker import summary


class TokenMLP(torch.nn.Module):
    """A linear + relu XNNPACK takes, a cumsum it leaves, over a dynamic number of tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(torch.relu(self.fc(x)), 1)


@pytest.fixture(scope="module")
def lowered():
    torch.manual_seed(0)
    model = TokenMLP().eval()
    tokens = torch.export.Dim("tokens", max=16)
    ep = torch.export.export(model, (torch.randn(1, 5, 8),), dynamic_shapes=({1: tokens},))
    edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
    return model, edge


def _document(artifact: SerializedArtifact) -> dict:
    return json.loads(artifact.exported_program)


def _with_document(artifact: SerializedArtifact, doc: dict) -> SerializedArtifact:
    return SerializedArtifact(
        json.dumps(doc).encode(), artifact.state_dict, artifact.constants, artifact.example_inputs
    )


def _delegate_node(doc: dict) -> dict:
    (node,) = [n for n in doc["graph_module"]["graph"]["nodes"] if n["target"].endswith("executorch_call_delegate")]
    return node


def _expressions(doc: dict) -> list[dict]:
    found = []

    def walk(x):
        if isinstance(x, dict):
            if "expr_str" in x:
                found.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(doc)
    return found


def test_a_delegated_dynamic_program_round_trips_in_executorch_form(lowered):
    model, edge = lowered
    program = edge.exported_program()
    artifact = serialize(program)
    doc = _document(artifact)
    assert doc["schema_version"] == {"major": 5, "minor": 4}
    node = _delegate_node(doc)
    assert [i["name"] for i in node["inputs"]] == ["lowered_module_0", "delegate_arg_0"]
    record = json.loads(node["inputs"][0]["arg"]["as_string"])
    assert record["backend_id"] == "XnnpackBackend"
    assert base64.b64decode(record["processed_bytes"]) == program.graph_module.lowered_module_0.processed_bytes
    assert node["outputs"] == [{"as_tensors": [{"name": "getitem"}]}]
    texts = {e["expr_str"] for e in _expressions(doc)}
    assert texts and not any("Symbol(" in t for t in texts)  # sympy's str, as ExecuTorch writes it
    back = deserialize(artifact)
    assert summary(back) == summary(program)
    assert {str(k): (v.lower, v.upper) for k, v in back.range_constraints.items()} == {
        str(k): (v.lower, v.upper) for k, v in program.range_constraints.items()
    }
    with torch.no_grad():
        for length in (1, 7, 16):
            x = torch.randn(1, length, 8)
            torch.testing.assert_close(back.module()(x), model(x))


@pytest.mark.parametrize(
    "text", ["s0", "64*s0", "s0**2 + 3", "FloorDiv(s0, 2)", "Mul(Integer(4), Symbol('s7', integer=True))"]
)
def test_shape_expressions_are_admitted(text):
    symbolic.check(text)


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').getcwd()",  # attribute access
        "exec('1')",  # a name that is neither a symbol nor a shape function
        "Symbol('__class__')",  # a quoted name that is not a symbol's
        "Pow(Integer(10), Integer(10000000000))",  # a number too big to build
        "10**Mul(Integer(10), Integer(10))",  # an exponent that is not a literal
        "s0 + " * 1000 + "s0",  # too long
        "FloorDiv(s0, 2",  # unbalanced
    ],
)
def test_other_text_is_refused_before_sympy_reads_it(text):
    with pytest.raises(ValueError, match="expected"):
        symbolic.check(text)


def test_a_hostile_expression_in_a_file_is_a_typed_error_and_never_runs(lowered, tmp_path):
    artifact = serialize(lowered[1].exported_program())
    doc = _document(artifact)
    _expressions(doc)[0]["expr_str"] = f"exec(\"open('{tmp_path}/ran', 'w')\")"
    with pytest.raises(SerializeError, match="expected"):
        deserialize(_with_document(artifact, doc))
    assert not (tmp_path / "ran").exists()


class _Payload:
    """Unpickled, this would create a directory: torch.load(weights_only=True) must refuse it."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_tensor_parts_are_never_unpickled(lowered, tmp_path):
    artifact = serialize(lowered[1].exported_program())
    buffer = io.BytesIO()
    torch.save({"fc.weight": _Payload(str(tmp_path / "ran"))}, buffer)
    hostile = SerializedArtifact(artifact.exported_program, buffer.getvalue(), artifact.constants, b"")
    with pytest.raises(SerializeError, match="cannot be read"):
        deserialize(hostile)
    assert not (tmp_path / "ran").exists()
    torch.save([torch.ones(1)], buffer := io.BytesIO())
    with pytest.raises(SerializeError, match="expected a dict or tuple of tensors"):
        deserialize(SerializedArtifact(artifact.exported_program, buffer.getvalue(), artifact.constants, b""))


def _set(key: str, value):
    def damage(record: dict) -> None:
        record[key] = value

    return damage


@pytest.mark.parametrize(
    "damage",
    [
        _set("processed_bytes", "not base64!"),
        _set("compile_specs", [{"key": "k"}]),
        _set("original_module", {"graph_module": {}}),
        _set("original_state_dict", base64.b64encode(b"PK\x03\x04 truncated").decode()),
        _set("named_data_store", "{"),
        lambda record: record.pop("backend_id"),
        _set("named_data_store", json.dumps({"buffers": [], "pte_data": {"w": {"buffer_index": 3, "alignment": 16}}})),
    ],
    ids=["blob", "compile_spec", "original_module", "state_dict", "named_data", "backend_id", "buffer_index"],
)
def test_a_damaged_lowered_module_is_a_typed_error(lowered, damage):
    artifact = serialize(lowered[1].exported_program())
    doc = _document(artifact)
    argument = _delegate_node(doc)["inputs"][0]["arg"]
    record = json.loads(argument["as_string"])
    damage(record)
    argument["as_string"] = json.dumps(record)
    with pytest.raises(SerializeError, match="cannot be read|expected base64|expected named data"):
        deserialize(_with_document(artifact, doc))


def test_a_lowered_module_name_that_is_not_an_attribute_name_is_refused(lowered):
    artifact = serialize(lowered[1].exported_program())
    doc = _document(artifact)
    _delegate_node(doc)["inputs"][0]["name"] = "__class__"
    with pytest.raises(SerializeError, match="expected a lowered module's attribute name"):
        deserialize(_with_document(artifact, doc))


def test_a_damaged_delegated_etrecord_is_an_etrecord_error(lowered, tmp_path):
    edge = copy.deepcopy(lowered[1])
    generate_etrecord(tmp_path / "etrecord.bin", edge, copy.deepcopy(edge).to_executorch())
    name = "edge_dialect_exported_program/forward"
    with zipfile.ZipFile(tmp_path / "etrecord.bin") as z:
        entries = {n: z.read(n) for n in z.namelist()}
    entries[name] = entries[name].replace(b"XnnpackBackend", b"XnnpackBackend\\\\x")  # a delegate's JSON broken
    with zipfile.ZipFile(tmp_path / "damaged.bin", "w") as z:
        for n, data in entries.items():
            z.writestr(n, data)
    assert parse_etrecord(tmp_path / "etrecord.bin").edge_dialect_program is not None
    with pytest.raises(ETRecordError, match="the ETRecord is corrupt"):
        parse_etrecord(tmp_path / "damaged.bin")
