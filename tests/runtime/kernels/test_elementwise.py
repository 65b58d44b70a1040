"""Element-wise kernels against torch's functional ops: every op over dtypes and shapes (broadcast, 0-d, empty).

Also holds the helpers the other ``test_elementwise_*`` files import: NumPy <-> torch conversion
(bfloat16 included), random inputs per dtype, and :func:`check`, which calls a kernel from the
registry with an ``out`` of torch's result dtype and compares with torch.
"""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch

from edgetorch.runtime import policy
from edgetorch.runtime.kernels.registry import KERNELS

BF16 = np.dtype(ml_dtypes.bfloat16)
TORCH_TO_NUMPY = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: BF16,
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
}
NUMPY_TO_TORCH = {v: k for k, v in TORCH_TO_NUMPY.items()}
FLOATS = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
INTS = [np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8)]
ALL = FLOATS + INTS + [np.dtype(np.bool_)]
TOL = {np.dtype(np.float32): 2e-6, np.dtype(np.float64): 1e-13, np.dtype(np.float16): 1e-3, BF16: 8e-3}


def ids(dtypes: list[np.dtype]) -> list[str]:
    return [d.name for d in dtypes]


def to_torch(x):
    """A NumPy array (bfloat16 included) as a torch tensor; anything else unchanged."""
    if not isinstance(x, np.ndarray):
        return x
    x = x if x.flags.c_contiguous else x.copy()  # np.ascontiguousarray would make 0-d arrays 1-d
    if x.dtype == BF16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(BF16)
    return t.numpy()


def sample(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0, low: float = -4, high: float = 4) -> np.ndarray:
    """Random values of ``dtype``: normal-ish floats in [low, high], integers over most of the range."""
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        return np.asarray(rng.integers(lo, hi, size=shape, endpoint=True)).astype(dtype)
    return np.asarray(rng.uniform(low, high, size=shape)).astype(dtype)


def _functional(name: str):
    """torch's functional overload taking the same arguments as the out overload ``name``."""
    op, overload = name.split("::")[1].split(".") if "." in name else (name.split("::")[1], "default")
    packet = getattr(torch.ops.aten, op)
    schema = getattr(packet, overload)._schema
    want = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
    for candidate in packet.overloads():
        s = getattr(packet, candidate)._schema
        if [(a.name, str(a.type)) for a in s.arguments] == want:
            return getattr(packet, candidate), s
    raise LookupError(f"no functional overload of {name} with arguments {want}")


def torch_result(name: str, *args) -> torch.Tensor:
    """The functional torch op matching out overload ``name``, called with ``args`` (NumPy or scalars)."""
    fn, schema = _functional(name)
    positional, keywords = [], {}
    for arg, value in zip(schema.arguments, args):
        if arg.kwarg_only:
            keywords[arg.name] = to_torch(value)
        else:
            positional.append(to_torch(value))
    return fn(*positional, **keywords)


def _overflow_as_inf(x: np.ndarray) -> np.ndarray:
    """``x`` in float64 with values within a factor 16 of the dtype's largest finite value read as infinity.

    Near the overflow edge the CPU's SIMD path decides whether a result rounds to the largest float or to
    infinity (sinh(89) in float32 is finite in one libm, inf in another); both mean "overflowed".
    """
    wide = x.astype(np.float64)
    edge = float(ml_dtypes.finfo(x.dtype).max) / 16
    return np.where(np.abs(wide) >= edge, np.copysign(np.inf, wide), wide)


def assert_matches(got: np.ndarray, want: np.ndarray, rtol: float | None = None, atol: float | None = None) -> None:
    assert got.shape == want.shape, f"shape {got.shape}, torch gives {want.shape}"
    assert got.dtype == want.dtype, f"dtype {got.dtype}, torch gives {want.dtype}"
    if got.dtype in TOL:
        tol = TOL[got.dtype]
        got64, want64 = _overflow_as_inf(got), _overflow_as_inf(want)
        np.testing.assert_allclose(got64, want64, rtol=rtol or tol, atol=atol or tol, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)


def run_kernel(name: str, args: tuple, out_shape: tuple[int, ...], dtype: np.dtype, spare: int = 0) -> np.ndarray:
    """Call the registered kernel with an ``out`` of ``dtype`` planned ``spare`` elements bigger than needed."""
    fn, nargs = KERNELS[name]
    assert nargs == len(args) + 1, f"{name} takes {nargs} arguments, the test gives {len(args)} + out"
    size = int(np.prod(out_shape)) + spare
    out = np.full(size, 7, dtype) if spare else np.full(out_shape, 7, dtype)
    return fn(*args, out)


def check(name: str, *args, spare: int = 0, rtol: float | None = None, atol: float | None = None) -> np.ndarray:
    """The kernel for ``name`` agrees with torch on ``args``; returns the kernel's result."""
    try:
        want = torch_result(name, *args)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch refuses these inputs: {str(e).splitlines()[0]}")
    want_np = to_numpy(want)
    got = run_kernel(name, args, tuple(want.shape), want_np.dtype, spare)
    assert_matches(got, want_np, rtol, atol)
    return got


SHAPES = [(3, 5), (), (0, 4), (2, 3, 4)]
UNARY = [
    "abs neg sign sqrt rsqrt reciprocal exp expm1 log log10 log1p log2 sin cos tan asin acos atan sinh cosh tanh",
    "asinh acosh atanh erf ceil floor round trunc sigmoid relu silu hardsigmoid hardswish isnan isinf logical_not",
]
UNARY_OPS = " ".join(UNARY).split()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary(op: str, dtype: np.dtype, shape: tuple[int, ...]) -> None:
    check(f"aten::{op}.out", sample(shape, dtype))


@pytest.mark.parametrize("dtype", INTS + [np.dtype(np.bool_)], ids=ids(INTS) + ["bool"])
def test_bitwise_not(dtype: np.dtype) -> None:
    check("aten::bitwise_not.out", sample((4, 6), dtype))


SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, -0.5, 2.5, 1e-30, 80.0, -80.0, 1e4])


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("op", UNARY_OPS)
def test_unary_special_values(op: str, dtype: np.dtype) -> None:
    check(f"aten::{op}.out", SPECIALS.astype(dtype))


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float64)], ids=["float32", "float64"])
def test_erf_is_ulp_accurate(dtype: np.dtype) -> None:
    x = np.concatenate([np.linspace(-7, 7, 20001), np.geomspace(1e-20, 1, 300)]).astype(dtype)
    fn, _ = KERNELS["aten::erf.out"]
    got = fn(x, np.empty_like(x)).astype(np.float64)
    want = torch.erf(torch.from_numpy(x)).numpy()
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(dtype))
    assert ulps.max() <= (4 if dtype == np.float32 else 16)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize(
    "name, params",
    [
        ("gelu", ("none",)),
        ("gelu", ("tanh",)),
        ("hardtanh", (-1, 1)),
        ("hardtanh", (-0.5, 2.5)),
        ("leaky_relu", (0.01,)),
        ("leaky_relu", (1.5,)),
        ("elu", (1, 1, 1)),
        ("elu", (0.5, 2, 1.5)),
        ("logit", (None,)),
        ("logit", (1e-3,)),
        ("softplus", (1, 20)),
        ("softplus", (2, 3)),
        ("clamp", (-1, 2)),
        ("clamp", (None, 0.5)),
        ("clamp", (1, None)),
        ("clamp", (3, -3)),
        ("round.decimals", (2,)),
        ("round.decimals", (-1,)),
    ],
    ids=str,
)
def test_unary_with_parameters(name: str, params: tuple, dtype: np.dtype) -> None:
    op = f"aten::{name}_out" if "." in name else f"aten::{name}.out"
    low, high = (0, 1) if name == "logit" else (-40, 40) if name == "round.decimals" else (-4, 4)
    for shape in [(3, 7), (), (0,)]:
        x = sample(shape, dtype, low=low, high=high)
        if name != "logit":
            x.reshape(-1)[:2] = [np.nan, -0.0][: x.size]
        check(op, x, *params)


@pytest.mark.parametrize("dtype", INTS, ids=ids(INTS))
def test_integer_clamp_and_activations(dtype: np.dtype) -> None:
    x = sample((4, 5), dtype)
    check("aten::clamp.out", x, -20, 30)
    check("aten::clamp.out", x, 0.5, None)
    check("aten::hardtanh.out", x, -1, 1)
    check("aten::relu.out", x)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids(FLOATS))
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_glu(dtype: np.dtype, dim: int) -> None:
    check("aten::glu.out", sample((4, 6, 2), dtype), dim)


BINARY_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 3), ()), ((0, 3), (1, 3))]
BINARY = [
    "mul",
    "div",
    "atan2",
    "maximum",
    "minimum",
    "fmod.Tensor",
    "remainder.Tensor",
    "floor_divide",
    "pow.Tensor_Tensor",
]
BITWISE = ["bitwise_and.Tensor", "bitwise_or.Tensor", "bitwise_xor.Tensor", "logical_and", "logical_or", "logical_xor"]
COMPARE = ["eq", "ne", "lt", "le", "gt", "ge"]
DIVIDES = {"div", "fmod.Tensor", "remainder.Tensor", "floor_divide"}


def out_name(op: str) -> str:
    return f"aten::{op}_out" if "." in op else f"aten::{op}.out"


def binary_inputs(op: str, dtype: np.dtype, shapes: tuple, other_dtype: np.dtype | None = None) -> tuple:
    a = sample(shapes[0], dtype, seed=1)
    b = sample(shapes[1], other_dtype or dtype, seed=2)
    if op.startswith("pow") and b.dtype.kind in "iu":
        b = (np.abs(b.astype(np.int64)) % 5).astype(b.dtype)
    if op.startswith("pow") and b.dtype.kind == "i":
        a = (a.astype(np.int64) % 7 - 3).astype(a.dtype)
    if op in DIVIDES and b.dtype.kind in "iub":
        b = np.where(b == 0, 1, b).astype(b.dtype)  # torch raises on integer division by zero
    return a, b


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("op", BINARY + BITWISE + [f"{c}.Tensor" for c in COMPARE])
def test_binary(op: str, dtype: np.dtype, shapes: tuple) -> None:
    a, b = binary_inputs(op, dtype, shapes)
    check(out_name(op), a, b)


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("op", ["add", "sub"])
@pytest.mark.parametrize("alpha", [1, 2])
def test_add_sub_alpha(op: str, alpha: int, dtype: np.dtype, shapes: tuple) -> None:
    a, b = binary_inputs(op, dtype, shapes)
    check(f"aten::{op}.out", a, b, alpha if dtype != np.bool_ else True)


@pytest.mark.parametrize(
    "dtypes",
    [
        (np.int32, np.float32),
        (np.int8, np.uint8),
        (np.float16, ml_dtypes.bfloat16),
        (np.bool_, np.int16),
        (np.int64, np.float16),
    ],
    ids=str,
)
@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "eq.Tensor", "lt.Tensor", "remainder.Tensor"])
def test_binary_mixed_dtypes(op: str, dtypes: tuple) -> None:
    a_dtype, b_dtype = (np.dtype(d) for d in dtypes)
    a, b = binary_inputs(op, a_dtype, ((3, 4), (4,)), b_dtype)
    args = (a, b, 1) if op == "add" else (a, b)
    check(out_name(op), *args)


@pytest.mark.parametrize("dtype", INTS, ids=ids(INTS))
@pytest.mark.parametrize("op", ["bitwise_left_shift.Tensor", "bitwise_right_shift.Tensor"])
def test_shifts(op: str, dtype: np.dtype) -> None:
    a = sample((5, 8), dtype)
    b = np.random.default_rng(3).integers(0, dtype.itemsize * 8 + 3, size=(5, 8)).astype(dtype)
    check(out_name(op), a, b)
    check(out_name(op.replace(".Tensor", ".Tensor_Scalar")), a, 3)


SCALARS = [2, -3, 2.5, True]
SCALAR_OPS = [
    "add.Scalar",
    "sub.Scalar",
    "rsub.Scalar",
    "mul.Scalar",
    "div.Scalar",
    "fmod.Scalar",
    "remainder.Scalar",
    "floor_divide.Scalar",
    "pow.Tensor_Scalar",
    "bitwise_and.Scalar",
    "bitwise_or.Scalar",
    "bitwise_xor.Scalar",
] + [f"{c}.Scalar" for c in COMPARE]


@pytest.mark.parametrize("value", SCALARS, ids=str)
@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("op", SCALAR_OPS)
def test_tensor_scalar(op: str, dtype: np.dtype, value) -> None:
    x = sample((3, 4), dtype)
    if op.startswith("pow") and dtype.kind in "iu":
        x = (x.astype(np.int64) % 7 - 3 * (dtype.kind == "i")).astype(dtype)
    if op in ("add.Scalar", "sub.Scalar", "rsub.Scalar"):
        check(out_name(op), x, value, 2 if dtype != np.bool_ else True)
        return
    if op.startswith("pow") and value == -3:
        value = 3
    check(out_name(op), x, value)


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("base", [2, 0.5, -1.5, True])
def test_pow_scalar_base(dtype: np.dtype, base) -> None:
    exponent = np.abs(sample((3, 4), dtype, low=-3, high=3)) if dtype != np.bool_ else sample((3, 4), dtype)
    if dtype.kind in "iu":
        exponent = (exponent.astype(np.int64) % 6).astype(dtype)
    check("aten::pow.Scalar_out", base, exponent)


@pytest.mark.parametrize("dtype", [np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.int64)], ids=str)
def test_integer_pow_negative_exponents(dtype: np.dtype) -> None:
    base = np.array([2, -1, 1, 0, 3, -1, -2, 1], dtype)
    exponent = np.array([-1, -3, -2, -1, 2, -4, 3, 0], dtype)
    check("aten::pow.Tensor_Tensor_out", base, exponent)


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids(FLOATS + INTS))
def test_div_rounding_modes(mode: str | None, dtype: np.dtype) -> None:
    a, b = binary_inputs("div", dtype, ((4, 5), (5,)))
    check("aten::div.out_mode", a, b, mode)
    check("aten::div.Scalar_mode_out", a, -3, mode)
    check("aten::div.Scalar_mode_out", a, 2.5, mode)


@pytest.mark.parametrize("op", ["div.out_mode", "floor_divide.out", "remainder.Tensor_out", "fmod.Tensor_out"])
def test_integer_division_by_zero_does_not_crash(op: str) -> None:
    # torch raises on these; the runtime must neither raise nor warn, and the other elements stay right.
    a = np.array([5, -5, 0, 7], np.int32)
    b = np.array([0, 0, 0, -2], np.int32)
    args = (a, b, "floor") if "mode" in op else (a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = run_kernel(f"aten::{op}", args, (4,), np.dtype(np.int32))
    assert got[3] == to_numpy(torch_result(f"aten::{op}", a[3:], b[3:], *args[2:]))[0]


def test_float_division_special_values() -> None:
    a = np.array([1.0, -1.0, 0.0, np.inf, -0.0, 5.0, -5.0], np.float32)
    b = np.array([0.0, 0.0, 0.0, 2.0, 3.0, -0.0, np.inf], np.float32)
    for op in ["div.out", "floor_divide.out", "remainder.Tensor_out", "fmod.Tensor_out", "atan2.out"]:
        check(f"aten::{op}", a, b)
    for mode in ["trunc", "floor"]:
        check("aten::div.out_mode", a, b, mode)


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize(
    "shapes", [((3, 4), (3, 4), (3, 4)), ((3, 1), (1, 4), ()), ((), (2, 3), (3,)), ((0,), (1,), (0,))]
)
def test_where(dtype: np.dtype, shapes: tuple) -> None:
    cond = sample(shapes[0], np.dtype(np.bool_), seed=5)
    check("aten::where.self_out", cond, sample(shapes[1], dtype, seed=6), sample(shapes[2], dtype, seed=7))


def test_where_mixed_dtypes_and_aliasing() -> None:
    cond = sample((4, 5), np.dtype(np.bool_), seed=5)
    check("aten::where.self_out", cond, sample((4, 5), np.dtype(np.int32)), sample((5,), np.dtype(np.float16)))
    x, y = sample((4, 5), np.dtype(np.float32), seed=1), sample((4, 5), np.dtype(np.float32), seed=2)
    want = np.where(cond, x, y)
    fn, _ = KERNELS["aten::where.self_out"]
    assert np.array_equal(fn(cond, x, y, x), want)  # the out is an input: still correct


@pytest.mark.parametrize("dtype", ALL, ids=ids(ALL))
@pytest.mark.parametrize("mask_shape", [(3, 4), (4,), ()], ids=str)
def test_masked_fill(dtype: np.dtype, mask_shape: tuple) -> None:
    mask = sample(mask_shape, np.dtype(np.bool_), seed=3)
    check("aten::masked_fill.Scalar_out", sample((3, 4), dtype), mask, 1 if dtype != np.bool_ else True)
    if dtype.kind == "f" or dtype == BF16:
        check("aten::masked_fill.Scalar_out", sample((3, 4), dtype), mask, float("-inf"))


@pytest.mark.parametrize("dtype", FLOATS + INTS, ids=ids(FLOATS + INTS))
def test_clamp_tensor(dtype: np.dtype) -> None:
    x = sample((3, 4), dtype)
    lo, hi = sample((4,), dtype, seed=8), sample((3, 1), dtype, seed=9)
    check("aten::clamp.Tensor_out", x, lo, hi)
    check("aten::clamp.Tensor_out", x, lo, None)
    check("aten::clamp.Tensor_out", x, None, hi)


@pytest.mark.parametrize(
    "name, args",
    [
        ("aten::add.out", lambda: (sample((2, 3), np.dtype(np.float32)), sample((3,), np.dtype(np.float32)), 1)),
        ("aten::mul.out", lambda: (sample((2, 3), np.dtype(np.int8)), sample((2, 3), np.dtype(np.int8)))),
        ("aten::lt.Scalar_out", lambda: (sample((2, 3), np.dtype(np.float16)), 0.5)),
        ("aten::gelu.out", lambda: (sample((2, 3), np.dtype(np.float32)), "none")),
        (
            "aten::where.self_out",
            lambda: (sample((2, 3), np.dtype(np.bool_)), sample((2, 3), BF16), sample((3,), BF16)),
        ),
        ("aten::sigmoid.out", lambda: (sample((2, 3), np.dtype(np.float32)),)),
        ("aten::clamp.out", lambda: (sample((2, 3), np.dtype(np.float32)), -1, 1)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_out_bigger_than_result_is_resized(name: str, args) -> None:
    got = check(name, *args(), spare=5)
    assert got.shape == (2, 3)


def test_int8_arithmetic_wraps_like_torch() -> None:
    a = np.array([100, -100, 127, -128], np.int8)
    check("aten::add.out", a, a, 1)
    check("aten::mul.Scalar_out", a, 3)
    check("aten::add.Scalar_out", a, 1000, 1)
    check("aten::lt.Scalar_out", a, 1000)
    check("aten::neg.out", a)
    check("aten::abs.out", a)


@pytest.mark.parametrize("compiled_tier", [False, True])
def test_gelu_float32_keeps_relative_precision_for_negative_inputs(
    compiled_tier: bool, monkeypatch, set_policy
) -> None:
    # Both tiers: NumPy passes, or one compiled pass when numba is there (compiled.py). float32 GELU is x * Phi(x) with erfc (no 1 + erf(x) that cancels for x < 0); the error left grows with
    # x^2, the float32 rounding of the exponent -x^2 / 2. The reference is float64 erfc (torch's float64 GELU
    # goes through 1 + erf and rounds to 0 below about -8).
    x = np.concatenate([np.linspace(-9, 9, 20001), -np.geomspace(1e-20, 1, 300), np.geomspace(1e-20, 1, 300)])
    x = x.astype(np.float32)
    set_policy(compiled=compiled_tier and policy.compiled_tier())
    fn, _ = KERNELS["aten::gelu.out"]
    got = fn(x, "none", np.empty_like(x)).astype(np.float64)
    want = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x.astype(np.float64)])
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps[np.abs(x) <= 3].max() <= 8
    assert ulps.max() <= 64
