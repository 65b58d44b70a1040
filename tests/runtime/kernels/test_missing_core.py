"""Core ATen coverage of the kernel library, and the overloads added to complete it, against torch eager.

``test_core_aten_ops_have_kernels`` maps every op tagged ``core`` to the overload ExecuTorch runs (its
out variant, or the ``*_copy`` out variant for views) and requires a registered kernel for each, except
the listed ones that are out of scope for the portable library.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._oracle import call, check, to_numpy
from tests.runtime.kernels.test_elementwise import check as check_elementwise
from tests.runtime.kernels.test_elementwise import sample

aten = torch.ops.aten

OUT_OF_SCOPE = {
    # Complex results (no complex arithmetic in the portable library).
    "aten::_fft_c2r",
    "aten::_fft_r2c",
    # Symbolic or in-place-resize ops that torch.export resolves or ExecuTorch never emits.
    "aten::sym_is_contiguous",
    "aten::resize_",
}
# Core ops with no out overload and the kernel name that serves them.
NO_OUT_OVERLOAD = {
    "aten::_local_scalar_dense.default": "aten::_local_scalar_dense",
    "aten::sym_numel.default": "aten::sym_numel",
    "aten::sym_storage_offset.default": "aten::sym_storage_offset",
    "aten::sym_size.int": "aten::sym_size.int",
    "aten::sym_stride.int": "aten::sym_stride.int",
    "aten::arange.start_step": "aten::arange.start_out",
    "aten::empty.memory_format": "aten::empty.out",
    "aten::empty_strided.default": "aten::empty_strided.out",
    "aten::randperm.default": "aten::randperm.out",
    "aten::full.default": "aten::full.out",
    "aten::full_like.default": "aten::full_like.out",
    "aten::rand.default": "aten::rand.out",
    "aten::randn.default": "aten::randn.out",
    "aten::scalar_tensor.default": "aten::scalar_tensor.out",
    "aten::_to_copy.default": "aten::_to_copy.out",
    "aten::squeeze.dim": "aten::squeeze_copy.dim_out",
    "aten::squeeze.dims": "aten::squeeze_copy.dims_out",
    "aten::select.int": "aten::select_copy.int_out",
    "aten::slice.Tensor": "aten::slice_copy.Tensor_out",
}


def _signature(schema) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]


def _out_overload(packet, schema) -> str | None:
    for name in packet.overloads():
        other = getattr(packet, name)._schema
        if any(a.is_out for a in other.arguments) and _signature(other) == _signature(schema):
            return name
    return None


def _served_by(op_name: str, overload: str) -> str | None:
    """The kernel name ExecuTorch would call for core op ``op_name.overload``."""
    packet = getattr(aten, op_name)
    if f"aten::{op_name}.{overload}" in NO_OUT_OVERLOAD:
        return NO_OUT_OVERLOAD[f"aten::{op_name}.{overload}"]
    out = _out_overload(packet, getattr(packet, overload)._schema)
    if out is None and hasattr(aten, f"{op_name}_copy"):
        copy = getattr(aten, f"{op_name}_copy")
        out = _out_overload(copy, getattr(copy, overload)._schema) if overload in copy.overloads() else None
        return None if out is None else f"aten::{op_name}_copy.{out}"
    return None if out is None else f"aten::{op_name}.{out}"


def _core_ops() -> list[tuple[str, str]]:
    # Every registered ATen op, not just those torch.ops.aten has resolved so far (which dir() lists).
    names = {op[6:].split(".")[0] for op in torch._C._dispatch_get_all_op_names() if op.startswith("aten::")}
    ops = []
    for name in sorted(names):
        packet = getattr(aten, name, None)
        if not hasattr(packet, "overloads"):
            continue
        ops += [(name, o) for o in packet.overloads() if torch.Tag.core in getattr(packet, o).tags]
    return ops


def test_core_aten_ops_have_kernels():
    missing = []
    for name, overload in _core_ops():
        if f"aten::{name}" in OUT_OF_SCOPE:
            continue
        served = _served_by(name, overload)
        if served is None or served not in KERNELS:
            missing.append(f"aten::{name}.{overload} -> {served}")
    assert not missing, "core ATen ops without a kernel:\n" + "\n".join(missing)


def test_max_min_two_tensor_forms():
    a, b = sample((3, 4), np.dtype(np.float32), seed=1), sample((4,), np.dtype(np.float32), seed=2)
    a[0, 0], b[1] = np.nan, np.nan
    check_elementwise("aten::max.out", a, b)
    check_elementwise("aten::min.out", a, b)
    check_elementwise("aten::max.out", sample((5,), np.dtype(np.int16)), sample((5,), np.dtype(np.int16), seed=3))


@pytest.mark.parametrize(
    "op", ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift"]
)
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_bitwise_scalar_tensor(op: str, dtype) -> None:
    other = np.random.default_rng(0).integers(0, 5, (3, 4)).astype(dtype)
    check_elementwise(f"aten::{op}.Scalar_Tensor_out", 13, other)


def test_log_sigmoid_forward():
    x = torch.tensor([-3.0, -0.5, 0.0, 2.0, float("inf"), float("-inf"), float("nan"), -100.0, 100.0])
    for dtype in (torch.float32, torch.float64):
        expected = aten.log_sigmoid_forward(x.to(dtype))
        for got, want in zip(call("aten::log_sigmoid_forward.output", x.to(dtype), out_like=expected), expected):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-45)


@pytest.mark.parametrize("offset, dim1, dim2", [(0, 0, 1), (1, 0, 1), (-2, 1, 2), (2, 2, 0), (7, 0, 1)])
def test_diagonal_scatter(offset: int, dim1: int, dim2: int) -> None:
    x = torch.randn(4, 5, 3)
    src = torch.randn(aten.diagonal.default(x, offset, dim1, dim2).shape)
    expected = aten.diagonal_scatter.default(x, src, offset, dim1, dim2)
    check(call("aten::diagonal_scatter.out", x, src, offset, dim1, dim2, out_like=expected), expected, exact=True)


@pytest.mark.parametrize("size, stride, offset", [([2, 3], [3, 1], 0), ([3, 2], [1, 3], 1), ([2, 2], [4, 2], None)])
def test_as_strided_scatter(size, stride, offset) -> None:
    x = torch.randn(3, 4)
    src = torch.randn(size)
    expected = aten.as_strided_scatter.default(x, src, size, stride, offset)
    check(call("aten::as_strided_scatter.out", x, src, size, stride, offset, out_like=expected), expected, exact=True)


def test_take():
    x = torch.randn(3, 4)
    index = torch.tensor([[0, 11, -1], [5, 5, -12]])
    expected = aten.take.default(x, index)
    check(call("aten::take.out", x, index, out_like=expected), expected, exact=True)
    with pytest.raises(IndexError, match="out of range"):
        call("aten::take.out", x, torch.tensor([12]), out_like=torch.empty(1))


@pytest.mark.parametrize("size, fill", [(2, -1), (5, -1), (9, 7), (0, -1)])
def test_nonzero_static(size: int, fill: int) -> None:
    x = torch.tensor([[0, 1, 0], [2, 0, 3], [0, 0, 4]])
    expected = aten.nonzero_static.default(x, size=size, fill_value=fill)
    got = KERNELS["aten::nonzero_static.out"][0](x.numpy(), size, fill, np.empty(tuple(expected.shape), np.int64))
    np.testing.assert_array_equal(got, expected.numpy())


def test_sym_storage_offset_is_zero():
    assert KERNELS["aten::sym_storage_offset"][0](np.zeros(3)) == 0


BAG_WEIGHT = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
BAG_INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 0])


def _check_embedding_bag(op: str, *args) -> None:
    """The kernel's four outputs, written into outs planned like torch's, equal torch's CPU outputs."""
    expected = getattr(aten, op).default(*args)
    if op == "_embedding_bag_forward_only" and args[4] == 0:  # sum mode: max_indices sized as the shape function says
        expected = (*expected[:3], torch.zeros(expected[0].shape[0], dtype=expected[3].dtype))
    outs = [np.empty(tuple(t.shape), to_numpy(t).dtype) for t in expected]
    got = KERNELS[f"aten::{op}.out"][0](*[to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args], *outs)
    for result, planned, want in zip(got, outs, expected):
        assert result.size == 0 or np.shares_memory(result, planned)
        check(result, want)


@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [-1, 2])
@pytest.mark.parametrize("offsets", [[0, 2, 2, 5], [0, 2, 2, 8], [0]])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("op", ["_embedding_bag", "_embedding_bag_forward_only"])
def test_embedding_bag(
    mode: int, include_last_offset: bool, padding_idx: int, offsets: list[int], dtype: torch.dtype, op: str
) -> None:
    args = (
        BAG_WEIGHT.to(dtype),
        BAG_INDICES,
        torch.tensor(offsets),
        False,
        mode,
        False,
        None,
        include_last_offset,
        padding_idx,
    )
    if include_last_offset and len(offsets) == 1:
        args = (*args[:2], torch.tensor([0, 8]), *args[3:])
    _check_embedding_bag(op, *args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_embedding_bag_per_sample_weights(dtype: torch.dtype) -> None:
    scale = torch.rand(8, generator=torch.Generator().manual_seed(1)).to(dtype)
    args = (BAG_WEIGHT.to(dtype), BAG_INDICES.int(), torch.tensor([0, 3, 3], dtype=torch.int32), False, 0, False, scale)
    _check_embedding_bag("_embedding_bag", *args, False, -1)


def test_embedding_bag_rejects_out_of_range_indices() -> None:
    expected = aten._embedding_bag.default(BAG_WEIGHT, BAG_INDICES, torch.tensor([0]))
    with pytest.raises(IndexError, match="rows of weight"):
        call("aten::_embedding_bag.out", BAG_WEIGHT, torch.tensor([6]), torch.tensor([0]), False, 0, False, None,
             False, -1, out_like=expected)  # fmt: skip


@pytest.mark.parametrize("n, dtype", [(10, torch.int64), (1, torch.int32), (0, torch.int64), (7, torch.float32)])
def test_randperm(n: int, dtype: torch.dtype) -> None:
    """A permutation of range(n) in ``out``'s dtype (the order is NumPy's, so only the set is compared)."""
    fn, _ = KERNELS["aten::randperm.out"]
    assert fn.impure
    got = fn(n, np.empty(n, to_numpy(torch.empty(0, dtype=dtype)).dtype))
    assert got.dtype == to_numpy(torch.empty(0, dtype=dtype)).dtype
    np.testing.assert_array_equal(np.sort(got), torch.randperm(n, dtype=dtype).sort().values.numpy())


def test_empty_strided_has_the_requested_shape() -> None:
    expected = aten.empty_strided.default([2, 3], [1, 2])
    got = call("aten::empty_strided.out", [2, 3], [1, 2], out_like=torch.empty(3, 4))
    assert got.shape == tuple(expected.shape)


@pytest.mark.parametrize("length, size", [(10, 5), (10, 3), (7, 7), (5, 8), (1, 1)])
def test_adaptive_avg_pool1d(length: int, size: int) -> None:
    x = torch.randn(2, 3, length)
    expected = aten.adaptive_avg_pool1d.default(x, [size])
    check(call("aten::adaptive_avg_pool1d.out", x, [size], out_like=expected), expected)


def _run_compiled(module: torch.nn.Module, *inputs: torch.Tensor) -> list[np.ndarray]:
    from edgetorch.exir import to_edge
    from edgetorch.runtime import Runtime

    pte = to_edge(torch.export.export(module, inputs)).to_executorch().buffer
    return Runtime.get().load_program(pte).load_method("forward").execute([x.numpy() for x in inputs])


class _BagAndPool(torch.nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.bag = torch.nn.EmbeddingBag(6, 3, mode=mode, padding_idx=2)
        self.pool = torch.nn.AdaptiveAvgPool1d(3)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor, x: torch.Tensor) -> tuple:
        return self.bag(indices, offsets), self.pool(x)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_and_adaptive_avg_pool1d_compiled(mode: str) -> None:
    module = _BagAndPool(mode).eval()
    inputs = (BAG_INDICES, torch.tensor([0, 2, 2, 5]), torch.randn(2, 4, 10))
    with torch.no_grad():
        expected = module(*inputs)
    for got, want in zip(_run_compiled(module, *inputs), expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)


class _Wrap(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


@pytest.mark.parametrize(
    "fn",
    [torch.max, torch.min, lambda x: torch.round(x, decimals=2), lambda x: torch.cumprod(x, 1)],
    ids=["max", "min", "round_decimals", "cumprod"],
)
def test_non_core_ops_with_kernels_compile(fn) -> None:
    """Ops outside Core ATen that torch does not decompose pass the Edge verifier when the runtime has a kernel."""
    x = torch.randn(3, 4)
    np.testing.assert_allclose(_run_compiled(_Wrap(fn), x)[0], fn(x).numpy(), rtol=1e-6)


def test_non_core_op_without_kernel_is_rejected() -> None:
    from edgetorch.exir import to_edge
    from edgetorch.exir.verification import SpecViolationError

    ep = torch.export.export(_Wrap(lambda x: aten.embedding_renorm.default(x.clone(), torch.tensor([0]), 1.0, 2.0)),
                             (torch.randn(3, 4),))  # fmt: skip
    with pytest.raises(SpecViolationError, match="embedding_renorm.default is not in the Core ATen op set"):
        to_edge(ep)


def test_training_batch_norm_compiles() -> None:
    """Training-mode batch norm decomposes (var_mean and arithmetic) and normalises with the batch statistics."""
    module = _Wrap(torch.nn.BatchNorm1d(4).train())
    x = torch.randn(5, 4, 6)
    with torch.no_grad():
        expected = module(x)
    np.testing.assert_allclose(_run_compiled(module, x)[0], expected.numpy(), rtol=1e-5, atol=1e-5)
