import math

import numpy as np
import pytest
import torch

from edgetorch.devtools.inspector._inspector_utils import convert_to_float_tensor
from edgetorch.errors import InvalidArgumentError


def test_scalar_tensor_and_array_become_float64():
    assert convert_to_float_tensor(3).dtype == torch.float64
    assert convert_to_float_tensor(3).item() == 3.0
    out = convert_to_float_tensor(torch.tensor([1, 2], dtype=torch.int32))
    assert out.dtype == torch.float64 and out.tolist() == [1.0, 2.0]
    assert convert_to_float_tensor(np.array([0.5], np.float32)).tolist() == [0.5]


def test_nan_becomes_zero_and_grad_is_dropped():
    t = torch.tensor([1.0, math.nan], requires_grad=True)
    out = convert_to_float_tensor(t)
    assert out.tolist() == [1.0, 0.0] and not out.requires_grad


def test_sequence_and_object_are_refused():
    with pytest.raises(InvalidArgumentError, match="one scalar or tensor"):
        convert_to_float_tensor([1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="number or tensor"):
        convert_to_float_tensor(object())


def test_debug_handles_overlap_when_they_share_a_node():
    from edgetorch.devtools.inspector._inspector_utils import _debug_handles_have_overlap

    assert _debug_handles_have_overlap((1, 2), (2, 3))
    assert not _debug_handles_have_overlap((1, 2), (3,))
    assert not _debug_handles_have_overlap((), (1,))


def test_inference_output_equal_compares_values():
    from edgetorch.devtools.inspector._inspector_utils import is_inference_output_equal

    a = torch.tensor([1.0, 2.0])
    assert is_inference_output_equal(a, a.clone())
    assert not is_inference_output_equal(a, a + 1)
    assert is_inference_output_equal([a], [a.clone()])
    assert not is_inference_output_equal([a], [a, a])
    assert is_inference_output_equal(3, 3) and not is_inference_output_equal(3, 4)
