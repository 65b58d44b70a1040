"""``edgetorch.runtime.memory.resize``: a tensor of a new shape inside its planned slot, or a typed refusal."""

from __future__ import annotations

import numpy as np
import pytest

from edgetorch.errors import Error
from edgetorch.runtime.memory import TensorResizeError, resize, view_of


def _slot(sizes: list[int], dim_order: list[int]) -> tuple[np.ndarray, np.ndarray]:
    arena = np.zeros(4 * int(np.prod(sizes)) + 64, np.uint8)
    return arena, view_of(arena, 64, np.dtype(np.float32), sizes, dim_order, "test slot")


@pytest.mark.parametrize(
    ("sizes", "dim_order", "shape"),
    [
        ([8, 16], [0, 1], (3, 16)),
        ([8, 16], [0, 1], (2, 5, 4)),
        ([8, 4, 6, 6], [0, 2, 3, 1], (3, 4, 6, 6)),
        ([8, 4, 6, 6], [0, 2, 3, 1], (2, 4, 3, 5)),
        ([2, 8, 5], [2, 0, 1], (2, 3, 5)),
        ([8, 16], [0, 1], (0, 16)),
    ],
)
def test_resized_tensor_starts_at_the_slot_in_its_dim_order(sizes, dim_order, shape):
    arena, slot = _slot(sizes, dim_order)
    got = resize(slot, shape)
    assert got.shape == shape
    if got.size:
        assert got.__array_interface__["data"][0] == arena.__array_interface__["data"][0] + 64
        physical = got.transpose(dim_order) if got.ndim == len(dim_order) else got
        assert physical.flags.c_contiguous, "the resized tensor must keep the slot's dim order, densely"
    got[...] = np.arange(got.size, dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(resize(slot, shape), got)


def test_the_same_shape_is_the_slot_itself():
    _, slot = _slot([4, 4], [0, 1])
    assert resize(slot, (4, 4)) is slot


def test_a_shape_above_the_slot_is_refused_with_its_capacity():
    _, slot = _slot([8, 16], [0, 1])
    with pytest.raises(
        TensorResizeError, match=r"shape \[9, 16\] \(144 elements\).*slot of shape \[8, 16\] \(128"
    ) as e:
        resize(slot, (9, 16))
    assert e.value.code == Error.NotSupported and "[error 0x" in str(e.value)  # ExecuTorch's code, not Internal


def test_a_strided_view_is_not_a_slot():
    _, slot = _slot([8, 16], [0, 1])
    with pytest.raises(ValueError, match="only a whole planned slot"):
        resize(slot[:, ::2], (2, 4))
