"""Scalar (executorch_prim) kernels against the Python/torch.sym_* semantics ExecuTorch maps them from."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import torch
from executorch.exir.passes.executorch_prim_ops_registry import _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS

from edgetorch.runtime.kernels.registry import KERNELS

SYM_OPS = [
    (op.name(), python_fn, len(op._schema.arguments)) for python_fn, op in _PYTHON_SYM_OPS_TO_EXECUTORCH_SYM_OPS.items()
]
INT_PAIRS = [(7, 2), (-7, 2), (7, -2), (-7, -3), (4, 4), (0, 5)]
MIXED_PAIRS = [(3.5, 2), (-3.5, 2.0), (7, 0.5), (-0.25, -4.0), (2.0, 2)]
SINGLES = [2.5, -2.5, 3.5, 3.7, -3.2, 0.5, 4, -4, 0]


def arguments(name: str, nargs: int) -> list[tuple]:
    """Inputs to try: ints and floats of both signs (``mod`` is integer-only in its schema)."""
    if nargs == 1:
        return [(v,) for v in SINGLES]
    if nargs == 3:
        return [(True, 1, 2), (False, 1.5, -2.0), (True, 3.0, 4.0), (False, -3, 4)]
    return INT_PAIRS if name.startswith("executorch_prim::mod") else INT_PAIRS + MIXED_PAIRS


@pytest.mark.parametrize("name, python_fn, nargs", SYM_OPS, ids=[s[0] for s in SYM_OPS])
def test_sym_op_follows_python_semantics(name, python_fn, nargs):
    fn, kernel_nargs = KERNELS[name]
    assert kernel_nargs == nargs
    for args in arguments(name, nargs):
        want = python_fn(*args)
        got = fn(*args)
        assert got == want and type(got) is type(want), f"{name}{args}: got {got!r}, expected {want!r}"


@pytest.mark.parametrize("name, python_fn", [("floordiv.int", operator.floordiv), ("mod.int", operator.mod)])
def test_integer_overloads(name, python_fn):
    fn, nargs = KERNELS[f"executorch_prim::{name}"]
    assert nargs == 2
    assert [fn(a, b) for a, b in INT_PAIRS] == [python_fn(a, b) for a, b in INT_PAIRS]


@pytest.mark.parametrize("shape", [(2, 3, 4), (5,), (0, 3), ()])
def test_tensor_size_queries_match_torch(shape):
    t = torch.zeros(shape)
    x = t.numpy()
    assert KERNELS["aten::sym_numel"][0](x) == torch.ops.aten.sym_numel.default(t)
    for dim in range(-len(shape), len(shape)):
        assert KERNELS["aten::sym_size.int"][0](x, dim) == torch.ops.aten.sym_size.int(t, dim)
        assert KERNELS["aten::sym_stride.int"][0](x, dim) == torch.ops.aten.sym_stride.int(t, dim)


@pytest.mark.parametrize(
    "name, schema",
    [
        ("aten::sym_size.int", torch.ops.aten.sym_size.int),
        ("aten::sym_stride.int", torch.ops.aten.sym_stride.int),
        ("aten::sym_numel", torch.ops.aten.sym_numel.default),
        ("aten::_local_scalar_dense", torch.ops.aten._local_scalar_dense.default),
    ],
)
def test_tensor_queries_take_the_schema_arguments(name, schema):
    assert KERNELS[name][1] == len(schema._schema.arguments)


@pytest.mark.parametrize(
    "value", [torch.tensor(3), torch.tensor([2.5]), torch.tensor([[True]]), torch.tensor(-7, dtype=torch.int8)]
)
def test_local_scalar_dense_matches_item(value):
    got = KERNELS["aten::_local_scalar_dense"][0](value.numpy())
    assert got == value.item() and type(got) is type(value.item())


def test_local_scalar_dense_of_empty_tensor_raises():
    with pytest.raises(ValueError, match="at least one element"):
        KERNELS["aten::_local_scalar_dense"][0](np.zeros((0,), np.float32))


def test_et_copy_index_stacks_one_row_per_iteration():
    fn, nargs = KERNELS["executorch_prim::et_copy_index.tensor"]
    assert nargs == 3
    rows = [torch.randn(2, 3) for _ in range(4)]
    planned = np.full((6, 2, 3), np.nan, np.float32)
    for i, row in enumerate(rows):
        got = fn(planned, row.numpy(), i)
        assert np.shares_memory(got, planned)
        np.testing.assert_array_equal(got, torch.stack(rows[: i + 1]).numpy())


def test_et_copy_index_rejects_mismatched_rows():
    fn, _ = KERNELS["executorch_prim::et_copy_index.tensor"]
    with pytest.raises(ValueError, match="one more dim"):
        fn(np.zeros((4, 3), np.float32), np.zeros((1, 3), np.float32), 0)
    with pytest.raises(ValueError, match="row shape"):
        fn(np.zeros((4, 3), np.float32), np.zeros((2,), np.float32), 1)


@pytest.mark.parametrize("size", [[3, 4], [-1, 2], [12], [2, 1, -1, 3]])
def test_et_view_is_a_view_with_torch_shape(size):
    fn, nargs = KERNELS["executorch_prim::et_view.default"]
    assert nargs == 2
    t = torch.arange(12.0).reshape(2, 6)
    x = t.numpy().copy()
    got = fn(x, size)
    assert np.shares_memory(got, x)
    np.testing.assert_array_equal(got, t.view(size).numpy())
