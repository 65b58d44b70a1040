"""exir.tensor's layout helpers and the emitter's use of them; InitializedMutableBufferPass.

Strides, dim orders and allocation records are the facts a ``.pte`` Tensor carries; the
cases are the ones where a naive rule goes wrong (0-sized, ambiguous and symbolic strides,
offsets past 32 bits).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, ShapeEnv

from edgetorch.exir import ExecutorchBackendConfig, to_edge
from edgetorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass
from edgetorch.exir.tensor import (
    AddressSpaceOverflowException,
    TensorSpec,
    contiguous_stride_from_shape,
    dim_order_from_stride,
    make_allocation_info,
    make_tensor_value,
    stride_from_dim_order,
)
from edgetorch.format.program import ScalarType
from edgetorch.runtime import Runtime


@pytest.mark.parametrize(
    ("sizes", "dim_order", "strides"),
    [
        ([2, 3, 4], [0, 1, 2], [12, 4, 1]),
        ([2, 3, 4, 5], [0, 2, 3, 1], [60, 1, 15, 3]),
        ([1, 3, 1, 1], [0, 2, 3, 1], [3, 1, 3, 3]),
        ([2, 0, 3], [0, 1, 2], [3, 3, 1]),  # a 0-sized dimension counts as 1
        ([], [], []),
    ],
)
def test_strides_and_dim_order_are_inverse(sizes, dim_order, strides):
    assert stride_from_dim_order(sizes, dim_order) == strides
    if sizes and 0 not in sizes:
        assert dim_order_from_stride(strides) == tuple(dim_order)
    if dim_order == sorted(dim_order):
        assert list(contiguous_stride_from_shape(sizes)) == strides


def test_dim_order_keeps_ties_in_place_and_refuses_a_broadcast_stride():
    assert dim_order_from_stride((3, 1, 1, 1)) == (0, 1, 2, 3)
    with pytest.raises(RuntimeError, match="0 stride"):
        dim_order_from_stride((10, 10, 0, 1))


def test_dim_order_of_unbacked_strides_uses_divisibility():
    env = ShapeEnv()
    u0, u1 = env.create_unbacked_symint(), env.create_unbacked_symint()
    assert dim_order_from_stride((1, u0, 2 * u0)) == (2, 1, 0)
    with pytest.raises(GuardOnDataDependentSymNode):
        dim_order_from_stride((u0, u1))


def test_allocation_info_splits_64_bit_offsets_and_refuses_others():
    info = make_allocation_info(1, (1 << 64) - 55555555)
    assert (info.memory_id, info.memory_offset_low, info.memory_offset_high) == (1, 4239411741, 0xFFFFFFFF)
    assert info.memory_offset == (1 << 64) - 55555555
    with pytest.raises(ValueError, match="negative"):
        make_allocation_info(0, -1)
    with pytest.raises(AddressSpaceOverflowException, match="64 bits"):
        make_allocation_info(0, 1 << 64)


def test_tensor_value_of_a_channels_last_spec():
    spec = TensorSpec.from_tensor(torch.ones(2, 3, 4, 5).contiguous(memory_format=torch.channels_last))
    value = make_tensor_value(0, make_allocation_info(0, 64), spec)
    assert (value.scalar_type, value.sizes, value.dim_order) == (ScalarType.FLOAT, [2, 3, 4, 5], [0, 2, 3, 1])
    assert value.allocation_info.memory_offset_low == 64


def test_inplace_base_is_storage_base_at_offset_zero_only():
    base, child = TensorSpec.from_tensor(torch.empty(4)), TensorSpec.from_tensor(torch.empty(4))
    child.inplace_base = base
    assert child.storage_base is base and child.inplace_base is base
    child.storage_base_offset = 4
    with pytest.raises(ValueError, match="offset 0"):
        _ = child.inplace_base
    with pytest.raises(ValueError, match="storage_base_offset is 0"):
        child.inplace_base = base


class _Counter(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache_pos", torch.zeros(3, dtype=torch.int64))
        self.register_buffer("steps", torch.zeros(3, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.cache_pos.add_(1)
        self.steps.add_(1)
        return self.cache_pos + x, self.steps + x


def test_initialized_mutable_buffer_pass_writes_the_marked_buffers_zero_state():
    edge = to_edge(torch.export.export(_Counter(), (torch.zeros(3, dtype=torch.int64),)))
    marked = copy.deepcopy(edge).to_executorch(
        ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(["cache"])])
    )
    plain = edge.to_executorch()

    def initial_states(manager) -> int:
        plan = manager.executorch_program.execution_plan[0]
        return sum(1 for v in plan.values if getattr(v.val, "data_buffer_idx", 0) and v.val.allocation_info)

    assert (initial_states(marked), initial_states(plain)) == (1, 0)
    method = Runtime.get().load_program(marked.buffer).load_method("forward")
    for step in (1, 2):
        pos, steps = method.execute([np.zeros(3, np.int64)])
        assert pos.tolist() == [step] * 3 and steps.tolist() == [step] * 3
