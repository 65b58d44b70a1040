"""Checking a kernel against the functional torch op of its out variant: shared by the shape and index tests.

Cases name inputs with ``T`` placeholders, materialised in each test's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
import torch

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
