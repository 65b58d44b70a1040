"""Shape kernels against torch's functional ops; also the shared helpers of the kernel tests (test_index imports them)."""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels import shape
from edgetorch.runtime.kernels.registry import KERNELS

ALL_DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]
NUMERIC_DTYPES = [d for d in ALL_DTYPES if d is not torch.bool]


@dataclass(frozen=True)
class T:
    """A placeholder for a random input tensor of ``shape`` in the test's dtype (or ``dtype`` if given)."""

    shape: tuple[int, ...]
    dtype: torch.dtype | None = None


def sample(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A reproducible random tensor with small values (exact in every dtype)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype is torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    low = 0 if dtype is torch.uint8 else -8
    return torch.randint(low, 9, shape, generator=gen).to(dtype)


def materialize(value: object, dtype: torch.dtype, seed: int = 0) -> object:
    """``value`` with every :class:`T` placeholder (also inside lists) replaced by a sampled tensor."""
    if isinstance(value, T):
        return sample(value.shape, value.dtype or dtype, seed)
    if isinstance(value, list):
        return [materialize(v, dtype, seed + i + 1) for i, v in enumerate(value)]
    return value


def to_numpy(value: object) -> object:
    """A torch tensor (or list of them) as NumPy arrays; bfloat16 becomes ``ml_dtypes.bfloat16``."""
    if isinstance(value, list):
        return [to_numpy(v) for v in value]
    if not isinstance(value, torch.Tensor):
        return value
    if value.dtype is torch.bfloat16:
        return value.contiguous().view(torch.int16).numpy().copy().view(ml_dtypes.bfloat16)
    return value.contiguous().numpy().copy()


def functional(name: str) -> torch._ops.OpOverload:
    """torch's functional overload for an out-variant kernel name (``aten::cat.out`` -> ``aten.cat.default``)."""
    namespace, rest = name.split("::")
    op, overload = rest.split(".")
    overload = "default" if overload == "out" else overload.removesuffix("_out")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def call_functional(op: torch._ops.OpOverload, args: list) -> object:
    """``op`` called with ``args`` given in schema order (keyword-only ones passed by name)."""
    params = op._schema.arguments
    positional = [a for p, a in zip(params, args) if not p.kwarg_only]
    keywords = {p.name: a for p, a in zip(params, args) if p.kwarg_only}
    return op(*positional, **keywords)


def planned(like: torch.Tensor, exact: bool) -> np.ndarray:
    """An out array for a result like ``like``: its exact shape, or a larger 1-D upper-bound slot."""
    dtype = to_numpy(torch.zeros((), dtype=like.dtype)).dtype
    if exact:
        return np.full(like.shape, 7, dtype)
    return np.full(like.numel() + 5, 7, dtype)


def run_kernel(name: str, args: list, outs: object) -> object:
    """Call the registered kernel ``name`` with ``args`` then ``outs``, checking its argument count."""
    fn, nargs = KERNELS[name]
    outs_list = list(outs) if isinstance(outs, tuple) else [outs]
    assert nargs == len(args) + len(outs_list), f"{name} takes {nargs} arguments"
    return fn(*args, *outs_list)


def assert_same(got: np.ndarray, want: torch.Tensor, atol: float = 0.0) -> None:
    """``got`` equals ``want`` in shape, dtype and value (NaNs compare equal)."""
    want_np = to_numpy(want)
    assert got.shape == want_np.shape, f"shape {got.shape}, expected {want_np.shape}"
    assert got.dtype == want_np.dtype, f"dtype {got.dtype}, expected {want_np.dtype}"
    if atol:
        np.testing.assert_allclose(got.astype(np.float64), want_np.astype(np.float64), atol=atol)
    else:
        np.testing.assert_array_equal(got, want_np)


def check_out_variant(name: str, args: list, dtype: torch.dtype, exact: bool = False, atol: float = 0.0) -> None:
    """Run kernel ``name`` on ``args`` (placeholders sampled in ``dtype``) and compare with torch's functional op."""
    torch_args = materialize(args, dtype)
    want = call_functional(functional(name), torch_args)
    np_args = to_numpy(torch_args)
    if isinstance(want, (list, tuple)):
        outs = [planned(w, exact) for w in want]
        got = run_kernel(name, np_args, (outs,))
        assert got is outs and len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w, atol)
        return
    out = planned(want, exact)
    got = run_kernel(name, np_args, out)
    assert np.shares_memory(got, out) or got.size == 0, "the result must live in the planned out"
    assert_same(got, want, atol)


def schema_arg_count(name: str) -> int:
    """The number of arguments (outs included) in torch's schema for the out-variant ``name``."""
    namespace, rest = name.split("::")
    op, _, overload = rest.partition(".")
    packet = getattr(getattr(torch.ops, namespace), op)
    return len(getattr(packet, overload or "default")._schema.arguments)


def assert_kernels_take_schema_arguments(module_name: str, expected: set[str]) -> None:
    """Every kernel registered by ``module_name`` (``expected`` among them) takes its schema's argument count."""
    names = {name for name, (fn, _) in KERNELS.items() if fn.__module__ == module_name}
    assert expected <= names, expected - names
    for name in names:
        assert KERNELS[name][1] == schema_arg_count(name), name


def test_every_shape_kernel_takes_the_schema_arguments():
    assert_kernels_take_schema_arguments(shape.__name__, {"aten::cat.out", "aten::slice_copy.Tensor_out"})


A = T((2, 3, 4))
CASES = [
    ("aten::view_copy.out", [A, [4, -1]]),
    ("aten::view_copy.out", [T((0, 3)), [3, 0]]),
    ("aten::_unsafe_view.out", [A, [6, 4]]),
    ("aten::alias_copy.out", [A]),
    ("aten::detach_copy.out", [T(())]),
    ("aten::lift_fresh_copy.out", [A]),
    ("aten::permute_copy.out", [A, [2, 0, 1]]),
    ("aten::permute_copy.out", [A, [-1, -3, 1]]),
    ("aten::expand_copy.out", [T((3, 1)), [2, -1, 4], False]),
    ("aten::expand_copy.out", [T(()), [2, 3], False]),
    ("aten::slice_copy.Tensor_out", [A, 1, 0, 2, 1]),
    ("aten::slice_copy.Tensor_out", [A, -1, None, None, 3]),
    ("aten::slice_copy.Tensor_out", [A, 2, -3, -1, 1]),
    ("aten::slice_copy.Tensor_out", [A, 0, -100, 100, 1]),
    ("aten::slice_copy.Tensor_out", [A, 1, 2, 1, 1]),
    ("aten::select_copy.int_out", [A, 1, -1]),
    ("aten::select_copy.int_out", [T((5,)), 0, 3]),
    ("aten::narrow_copy.out", [A, 2, 1, 2]),
    ("aten::narrow_copy.out", [A, -1, -3, 3]),
    ("aten::squeeze_copy.out", [T((1, 3, 1, 2))]),
    ("aten::squeeze_copy.dim_out", [T((1, 3, 1)), -1]),
    ("aten::squeeze_copy.dim_out", [T((2, 3)), 0]),
    ("aten::squeeze_copy.dims_out", [T((1, 3, 1, 1)), [0, -1, 1]]),
    ("aten::squeeze_copy.dim_out", [T(()), 0]),
    ("aten::unsqueeze_copy.out", [A, -1]),
    ("aten::unsqueeze_copy.out", [A, 0]),
    ("aten::unsqueeze_copy.out", [T(()), 0]),
    ("aten::t_copy.out", [T((2, 5))]),
    ("aten::t_copy.out", [T((5,))]),
    ("aten::transpose_copy.int_out", [A, 0, -1]),
    ("aten::flip.out", [A, [0, -1]]),
    ("aten::flip.out", [A, []]),
    ("aten::roll.out", [A, [1, -2], [0, 2]]),
    ("aten::roll.out", [A, [5], []]),
    ("aten::as_strided_copy.out", [T((4, 5)), [3, 2], [5, 2], 1]),
    ("aten::as_strided_copy.out", [T((4, 5)), [2, 3], [1, 0], None]),
    ("aten::diagonal_copy.out", [A, 0, 1, 2]),
    ("aten::diagonal_copy.out", [A, 1, -1, 0]),
    ("aten::diagonal_copy.out", [T((3, 3)), -5, 0, 1]),
    ("aten::tril.out", [T((4, 5)), 0]),
    ("aten::tril.out", [A, -1]),
    ("aten::triu.out", [T((4, 5)), 2]),
    ("aten::triu.out", [A, -1]),
    ("aten::unfold_copy.out", [T((2, 7)), 1, 3, 2]),
    ("aten::unfold_copy.out", [A, 0, 2, 1]),
    ("aten::unfold_copy.out", [T(()), 0, 1, 1]),
    ("aten::cat.out", [[T((2, 3)), T((1, 3)), T((0, 3))], 0]),
    ("aten::cat.out", [[A, A], -1]),
    ("aten::cat.out", [[T((0,)), T((2, 3)), T((0,))], 1]),
    ("aten::concat.out", [[T((2,)), T((3,))], 0]),
    ("aten::stack.out", [[A, A, A], 1]),
    ("aten::stack.out", [[T((2,)), T((2,))], -1]),
    ("aten::split_copy.Tensor_out", [T((7, 2)), 3, 0]),
    ("aten::split_copy.Tensor_out", [A, 2, -1]),
    ("aten::split_copy.Tensor_out", [T((0, 3)), 2, 0]),
    ("aten::split_with_sizes_copy.out", [A, [1, 0, 2], 1]),
    ("aten::unbind_copy.int_out", [A, -2]),
    ("aten::repeat.out", [T((2, 3)), [2, 1, 3]]),
    ("aten::repeat.out", [T((2, 3)), [0, 2]]),
    ("aten::repeat.out", [T(()), [3]]),
]


def case_id(case: tuple) -> str:
    name, args = case
    return name.split("::")[1] + str([a.shape if isinstance(a, T) else a for a in args])


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_shape_kernel_matches_torch(case, dtype):
    check_out_variant(*case, dtype)


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_shape_kernel_with_exactly_planned_out(case):
    check_out_variant(*case, torch.float32, exact=True)


@pytest.mark.parametrize(
    "dtypes",
    [
        (torch.int32, torch.float32),
        (torch.bool, torch.int64),
        (torch.float16, torch.float32),
        (torch.uint8, torch.int8),
    ],
    ids=str,
)
def test_cat_promotes_to_the_out_dtype(dtypes):
    check_out_variant("aten::cat.out", [[T((2, 3), dtypes[0]), T((1, 3), dtypes[1])], 0], torch.float32)


def test_repeat_interleave_counts():
    repeats = torch.tensor([2, 0, 3, 1])
    check_out_variant("aten::repeat_interleave.Tensor_out", [repeats, None], torch.int64)
    check_out_variant("aten::repeat_interleave.Tensor_out", [repeats.to(torch.int32), 6], torch.int64)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_view_as_real_and_back(dtype):
    z = torch.complex(torch.randn(2, 3), torch.randn(2, 3)).to(dtype)
    check_out_variant("aten::view_as_real_copy.out", [z], dtype)
    check_out_variant("aten::view_as_complex_copy.out", [torch.view_as_real(z).contiguous()], dtype)


def test_out_smaller_than_the_result_is_refused():
    x = np.arange(6, dtype=np.float32)
    with pytest.raises(ValueError, match="does not fit"):
        run_kernel("aten::repeat.out", [x, [2]], np.empty(11, np.float32))


def test_dynamic_shape_reuses_one_slot():
    out = np.empty(24, np.float32)
    for n in (4, 1, 3):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
        got = run_kernel("aten::permute_copy.out", [x, [1, 0]], out)
        assert got.shape == (6, n) and np.shares_memory(got, out)
        np.testing.assert_array_equal(got, x.T)


@pytest.mark.parametrize(
    "name, args",
    [
        ("aten::select_copy.int_out", [np.zeros((2, 3)), 2, 0]),
        ("aten::as_strided_copy.out", [np.zeros((2, 3)), [2, 2], [3, 2], 1]),
        ("aten::split_with_sizes_copy.out", [np.zeros((5,)), [2, 2], 0]),
        ("aten::narrow_copy.out", [np.zeros((5,)), 0, 3, 3]),
    ],
)
def test_bad_arguments_raise(name, args):
    with pytest.raises((IndexError, ValueError)):
        run_kernel(name, args, [np.empty(10)] * 2 if "split" in name else np.empty(10))


def test_split_with_wrong_out_count_raises():
    with pytest.raises(ValueError, match="produces 3 tensors"):
        run_kernel("aten::split_copy.Tensor_out", [np.zeros((5,)), 2, 0], ([np.empty(2), np.empty(2)],))
