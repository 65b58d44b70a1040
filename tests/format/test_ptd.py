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
