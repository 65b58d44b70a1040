"""Schema dataclasses through JSON (exir._serialize._dataclass): ETDump round trips, unions tagged, errors typed."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from edgetorch.devtools.etdump import schema_flatcc as flatcc
from edgetorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc, serialize_to_etdump_flatcc
from edgetorch.exir._serialize._dataclass import _DataclassEncoder, _json_to_dataclass


def _etdump() -> flatcc.ETDumpFlatCC:
    tensor = flatcc.Tensor(scalar_type=flatcc.ScalarType.FLOAT, sizes=[2, 3], strides=[3, 1], offset=64)
    debug = flatcc.DebugEvent(
        name="conv",
        chain_index=0,
        instruction_id=4,
        delegate_debug_id_str="",
        delegate_debug_id_int=-1,
        debug_entry=flatcc.Value(val=flatcc.ValueType.TENSOR.value, tensor=tensor, output=flatcc.Bool(True)),
    )
    profile = flatcc.ProfileEvent(
        name="OPERATOR_CALL",
        chain_index=0,
        instruction_id=4,
        delegate_debug_id_str="",
        delegate_debug_id_int=-1,
        delegate_debug_metadata=b"\x01\x02",
        start_time=10,
        end_time=25,
    )
    events = [flatcc.Event(profile_event=profile), flatcc.Event(debug_event=debug)]
    return flatcc.ETDumpFlatCC(version=0, run_data=[flatcc.RunData(name="forward", events=events)])


def test_etdump_round_trips_through_bytes_and_json() -> None:
    etdump = _etdump()
    back = deserialize_from_etdump_flatcc(serialize_to_etdump_flatcc(etdump), size_prefixed=False)
    assert back == etdump
    text = json.dumps(back, cls=_DataclassEncoder)
    data = json.loads(text)
    assert data["run_data"][0]["events"][0]["profile_event"]["delegate_debug_metadata"] == [1, 2]
    assert data["run_data"][0]["events"][1]["debug_event"]["debug_entry"]["val"] == flatcc.ValueType.TENSOR
    rebuilt = _json_to_dataclass(data, flatcc.ETDumpFlatCC)
    assert rebuilt == etdump
    assert rebuilt.run_data[0].events[1].debug_event.debug_entry.tensor.scalar_type is flatcc.ScalarType.FLOAT


@dataclass
class _A:
    x: int


@dataclass
class _B:
    y: str


@dataclass
class _Holder:
    item: _A | _B
    note: str | None = None


def test_union_fields_carry_their_class_name() -> None:
    data = json.loads(json.dumps(_Holder(item=_B(y="b")), cls=_DataclassEncoder))
    assert data == {"item": {"y": "b"}, "item_type": "_B", "note": None}
    assert _json_to_dataclass(data, _Holder) == _Holder(item=_B(y="b"))
    assert _json_to_dataclass({"item": {"x": 3}, "item_type": "_A"}, _Holder) == _Holder(item=_A(x=3))
    with pytest.raises(TypeError, match="_Holder.item_type"):
        _json_to_dataclass({"item": {"x": 3}, "item_type": "_C"}, _Holder)


def test_missing_required_field_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="_A.x: expected a value"):
        _json_to_dataclass({}, _A)
    assert _json_to_dataclass([1, 2], None) == [1, 2]
