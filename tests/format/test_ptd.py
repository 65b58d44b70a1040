"""The .ptd (FlatTensor) container: our writer and ExecuTorch's reader agree, and the reverse."""

import numpy as np
import pytest

from edgetorch.format.program import ScalarType
from edgetorch.format.ptd import TensorLayout, load_ptd, save_ptd
from edgetorch.format.pte import FormatError


def _executorch_ptd(arrays: dict[str, np.ndarray]) -> bytes:
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    payload = DataPayload(
        buffers=[a.tobytes() for a in arrays.values()],
        named_data={k: DataEntry(buffer_index=i, alignment=16, tensor_layout=None) for i, k in enumerate(arrays)},
    )
    return bytes(FlatTensorSerializer().serialize(payload))


def test_reads_executorch_ptd():
    arrays = {"w": np.arange(12, dtype=np.float32), "b": np.ones(5, np.int64)}
    ptd = load_ptd(_executorch_ptd(arrays))
    data = ptd.named_data()
    assert set(data) == {"w", "b"}
    np.testing.assert_array_equal(np.frombuffer(data["w"], np.float32), arrays["w"])
    np.testing.assert_array_equal(np.frombuffer(data["b"], np.int64), arrays["b"])


def test_roundtrip_and_executorch_reads_ours():
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    raw = save_ptd(
        {"layer.weight": (a.tobytes(), TensorLayout(ScalarType.FLOAT, [3, 4], [0, 1])), "blob": (b"xyz", None)}
    )
    ptd = load_ptd(raw)
    np.testing.assert_array_equal(np.frombuffer(ptd.named_data()["layer.weight"], np.float32).reshape(3, 4), a)
    assert ptd.flat_tensor.named_data[0].tensor_layout.sizes == [3, 4]
    from executorch.exir._serialize._cord import Cord
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    theirs = FlatTensorSerializer().deserialize(Cord(raw))
    assert bytes(theirs.buffers[theirs.named_data["blob"].buffer_index]) == b"xyz"


@pytest.mark.parametrize("cut", [0, 7, 20, 60, 130])
def test_truncated_ptd_is_refused(cut):
    raw = save_ptd({"w": (bytes(256), None)})
    with pytest.raises(FormatError):
        load_ptd(raw[:cut]).named_data()


def _layout_payload(entries: dict[str, tuple[np.ndarray, bool]]) -> bytes:
    """ExecuTorch's .ptd for ``key -> (array, with layout)``; equal arrays share one buffer, as in its store."""
    from executorch.exir._serialize.data_serializer import DataEntry, DataPayload
    from executorch.exir.scalar_type import ScalarType as EtScalarType
    from executorch.exir.tensor_layout import TensorLayout as EtLayout
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    buffers, named = [], {}
    for key, (a, with_layout) in entries.items():
        raw = a.tobytes()
        if raw not in buffers:
            buffers.append(raw)
        layout = EtLayout(EtScalarType(_SCALAR[a.dtype]), list(a.shape), list(range(a.ndim))) if with_layout else None
        named[key] = DataEntry(buffer_index=buffers.index(raw), alignment=16, tensor_layout=layout)
    return bytes(FlatTensorSerializer().serialize(DataPayload(buffers=buffers, named_data=named)))


_SCALAR = {
    np.dtype(np.float32): ScalarType.FLOAT,
    np.dtype(np.int64): ScalarType.LONG,
    np.dtype(np.uint8): ScalarType.BYTE,
}

_ENTRIES = {
    "fc.weight": (np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32), True),
    "fc.bias": (np.arange(5, dtype=np.float32), True),
    "steps": (np.array(3, dtype=np.int64), True),
    "tied.weight": (np.random.default_rng(1).standard_normal((5, 7)).astype(np.float32), True),
    "opaque": (np.frombuffer(b"packed weights", np.uint8).copy(), False),
}


def _ours(entries: dict[str, tuple[np.ndarray, bool]]) -> bytes:
    return save_ptd(
        {
            key: (a.tobytes(), TensorLayout(_SCALAR[a.dtype], list(a.shape), list(range(a.ndim))) if lay else None)
            for key, (a, lay) in entries.items()
        }
    )


def test_same_layout_as_executorch_writer():
    """Same header fields, segments, named data and data bytes; only the flatbuffer's encoding may differ."""
    ours, theirs = load_ptd(_ours(_ENTRIES)), load_ptd(_layout_payload(_ENTRIES))
    assert ours.flat_tensor == theirs.flat_tensor
    assert ours.segment_base_offset == theirs.segment_base_offset
    assert len(ours.data) == len(theirs.data)
    assert bytes(ours.data[ours.segment_base_offset :]) == bytes(theirs.data[theirs.segment_base_offset :])
    tied = {nd.key: nd.segment_index for nd in ours.flat_tensor.named_data}
    assert tied["fc.weight"] == tied["tied.weight"], "equal blobs should share one segment"


def test_executorch_reads_layouts_we_write():
    from executorch.exir._serialize._cord import Cord
    from executorch.extension.flat_tensor.serialize.serialize import FlatTensorSerializer

    theirs = FlatTensorSerializer().deserialize(Cord(_ours(_ENTRIES)))
    assert set(theirs.named_data) == set(_ENTRIES)
    for key, (a, with_layout) in _ENTRIES.items():
        entry = theirs.named_data[key]
        assert bytes(theirs.buffers[entry.buffer_index]) == a.tobytes()
        if with_layout:
            assert int(entry.tensor_layout.scalar_type) == int(_SCALAR[a.dtype])
            assert list(entry.tensor_layout.sizes) == list(a.shape)
            assert list(entry.tensor_layout.dim_order) == list(range(a.ndim))
        else:
            assert entry.tensor_layout is None


@pytest.mark.parametrize("alignment", [0, 3, 48, -16])
def test_segment_alignment_must_be_a_power_of_two(alignment):
    with pytest.raises(ValueError, match="power of two"):
        save_ptd({"w": (b"abcd", None)}, segment_alignment=alignment)
