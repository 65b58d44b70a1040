"""FlatTensorSerializer with DataPayloads: per-entry alignment, shared buffers, version refusal, store output."""

from __future__ import annotations

from unittest import mock

import pytest

from edgetorch.exir._serialize._cord import Cord
from edgetorch.exir._serialize.data_serializer import DataEntry, DataPayload
from edgetorch.extension.flat_tensor.serialize import serialize as ft
from edgetorch.format.program import ScalarType
from edgetorch.format.ptd import TensorLayout, load_ptd

_LAYOUT = TensorLayout(scalar_type=ScalarType.FLOAT, sizes=[2], dim_order=[0])
_PAYLOAD = DataPayload(
    buffers=[b"\x01" * 8, b"\x02" * 3],
    named_data={
        "a": DataEntry(buffer_index=0, alignment=0, tensor_layout=_LAYOUT),
        "b": DataEntry(buffer_index=1, alignment=256, tensor_layout=None),
        "a_again": DataEntry(buffer_index=0, alignment=0, tensor_layout=_LAYOUT),
    },
)


def test_payload_round_trip_and_layout() -> None:
    serializer = ft.FlatTensorSerializer(ft.FlatTensorConfig(segment_alignment=32))
    raw = bytes(serializer.serialize(_PAYLOAD))
    header = ft.FlatTensorHeader.from_bytes(raw[8:])
    assert header.flatbuffer_offset == 48 and header.segment_base_offset % 32 == 0
    flat = ft._deserialize_to_flat_tensor(raw[: header.flatbuffer_offset + header.flatbuffer_size])
    assert [(s.offset, s.size) for s in flat.segments] == [(0, 8), (256, 3)]  # "b" aligned to lcm(32, 256)
    assert [(n.key, n.segment_index) for n in flat.named_data] == [("a", 0), ("b", 1), ("a_again", 0)]
    assert load_ptd(raw).named_data()["b"] == b"\x02" * 3
    back = serializer.deserialize(Cord(raw))
    assert back.buffers == _PAYLOAD.buffers
    assert back.named_data["a"] == DataEntry(buffer_index=0, alignment=1, tensor_layout=_LAYOUT)
    output = serializer.deserialize_to_named_data_store_output(raw, "weights")
    assert output.buffers == _PAYLOAD.buffers and set(output.external_data["weights"]) == {"a", "b", "a_again"}


def test_newer_version_is_refused_older_is_read() -> None:
    serializer = ft.FlatTensorSerializer()
    with mock.patch.object(ft, "_FLAT_TENSOR_VERSION", 1):
        newer = bytes(serializer.serialize(_PAYLOAD))
        assert serializer.deserialize(bytes(serializer.serialize(_PAYLOAD))).buffers == _PAYLOAD.buffers
    with pytest.raises(NotImplementedError, match="version is 1"):
        serializer.deserialize(newer)
    with pytest.raises(IndexError, match="buffer_index 5"):
        serializer.serialize(DataPayload(buffers=[], named_data={"x": DataEntry(5, 1)}))
    with pytest.raises(ValueError, match="identifier"):
        ft._deserialize_to_flat_tensor(b"\x00" * 16)
