"""Every kernel with more than one out (or a list of outs) resizes each of them inside its planned slot.

With dynamic shapes each out arrives at its upper-bound shape. Here every slot is one larger than the result in
every dimension and filled with a sentinel; each returned tensor must have torch's shape and values and start at
its own slot's first byte. The table must name every such kernel the registry holds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from edgetorch.runtime.kernels.registry import KERNELS
from tests.runtime.kernels._out_variants import to_numpy

aten = torch.ops.aten


def _r(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _ints(*shape: int) -> torch.Tensor:
    """Small integers with many ties (what mode and stable sorting are about)."""
    return torch.randint(0, 3, shape, generator=torch.Generator().manual_seed(0))


def _stats(x: torch.Tensor, groups: int) -> tuple[torch.Tensor, torch.Tensor]:
    _, mean, rstd = aten.native_group_norm(x, None, None, x.shape[0], x.shape[1], x[0, 0].numel(), groups, 1e-5)
    return mean, rstd


def _square(seed: int = 0) -> torch.Tensor:
    """A batch of well-conditioned 3x3 matrices (diagonally dominant)."""
    return _r(2, 3, 3, seed=seed) + 4 * torch.eye(3)


def _spd() -> torch.Tensor:
    a = _r(2, 3, 3)
    return a @ a.mT + 3 * torch.eye(3)


@dataclass(frozen=True)
class Case:
    reference: Callable  # torch's functional op, called with the same arguments
    args: Callable[[], list]  # the schema's non-out arguments, in order
    atol: float = 1e-5


X = lambda: _r(3, 4, 5)  # noqa: E731
X4 = lambda: _r(2, 3, 6, 6)  # noqa: E731
LN_STATS = lambda: aten.native_layer_norm(X(), [5], None, None, 1e-5)  # noqa: E731

CASES: dict[str, Case] = {
    "aten::_embedding_bag.out": Case(
        aten._embedding_bag,
        lambda: [
            _r(10, 3),
            torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]),
            torch.tensor([0, 4]),
            False,
            0,
            False,
            None,
            False,
            -1,
        ],
    ),
    "aten::_embedding_bag_forward_only.out": Case(
        aten._embedding_bag_forward_only,
        lambda: [
            _r(10, 3),
            torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]),
            torch.tensor([0, 3]),
            False,
            2,
            False,
            None,
            True,
            -1,
        ],
    ),
    "aten::_native_batch_norm_legit.no_stats_out": Case(
        aten._native_batch_norm_legit.no_stats, lambda: [X(), _r(4), _r(4), True, 0.1, 1e-5]
    ),
    "aten::_native_batch_norm_legit.out": Case(
        aten._native_batch_norm_legit, lambda: [X(), _r(4), _r(4), _r(4), _r(4).abs(), True, 0.1, 1e-5]
    ),
    "aten::_native_batch_norm_legit_no_training.out": Case(
        aten._native_batch_norm_legit_no_training, lambda: [X(), _r(4), _r(4), _r(4), _r(4).abs(), 0.1, 1e-5]
    ),
    "aten::native_batch_norm.out": Case(
        aten.native_batch_norm, lambda: [X(), _r(4), _r(4), _r(4), _r(4).abs(), True, 0.1, 1e-5]
    ),
    "aten::aminmax.out": Case(
        lambda x, dim, keepdim: aten.aminmax(x, dim=dim, keepdim=keepdim), lambda: [X(), 1, False]
    ),
    "aten::convolution_backward.out": Case(
        aten.convolution_backward,
        lambda: [_r(2, 4, 4, 4), X4(), _r(4, 3, 3, 3), [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1, [True] * 3],
        atol=1e-4,
    ),
    "aten::cummax.out": Case(aten.cummax, lambda: [X(), 1]),
    "aten::cummin.out": Case(aten.cummin, lambda: [X(), -1]),
    "aten::kthvalue.values": Case(aten.kthvalue, lambda: [X(), 2, -1, False]),
    "aten::log_sigmoid_forward.output": Case(aten.log_sigmoid_forward, lambda: [X()]),
    "aten::max.dim_max": Case(aten.max.dim, lambda: [X(), 1, False]),
    "aten::min.dim_min": Case(aten.min.dim, lambda: [X(), -1, True]),
    "aten::max_pool2d_with_indices.out": Case(
        aten.max_pool2d_with_indices, lambda: [X4(), [2, 2], [2, 2], [0, 0], [1, 1], False]
    ),
    "aten::max_pool3d_with_indices.out": Case(
        aten.max_pool3d_with_indices, lambda: [_r(1, 2, 4, 4, 4), [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False]
    ),
    "aten::adaptive_max_pool2d.out": Case(aten.adaptive_max_pool2d, lambda: [X4(), [4, 3]]),
    "aten::adaptive_max_pool3d.out": Case(aten.adaptive_max_pool3d, lambda: [_r(1, 2, 5, 4, 4), [2, 3, 2]]),
    "aten::fractional_max_pool2d.output": Case(
        aten.fractional_max_pool2d,
        lambda: [X4(), [2, 2], [4, 3], torch.rand(2, 3, 2, generator=torch.Generator().manual_seed(1))],
    ),
    "aten::fractional_max_pool3d.output": Case(
        aten.fractional_max_pool3d,
        lambda: [
            _r(1, 2, 5, 6, 4),
            [2, 2, 2],
            [3, 4, 2],
            torch.rand(1, 2, 3, generator=torch.Generator().manual_seed(2)),
        ],
    ),
    "aten::median.dim_values": Case(aten.median.dim, lambda: [X(), 1, False]),
    "aten::nanmedian.dim_values": Case(aten.nanmedian.dim, lambda: [X(), -1, False]),
    "aten::mode.values": Case(aten.mode, lambda: [_ints(3, 4, 5), -1, False]),
    "aten::native_dropout.out": Case(aten.native_dropout, lambda: [X(), 0.5, False]),
    "aten::native_group_norm.out": Case(aten.native_group_norm, lambda: [X4(), _r(3), _r(3), 2, 3, 36, 3, 1e-5]),
    "aten::native_group_norm_backward.out": Case(
        aten.native_group_norm_backward,
        lambda: [_r(2, 4, 3, seed=1), _r(2, 4, 3), *_stats(_r(2, 4, 3), 2), _r(4), 2, 4, 3, 2, [True] * 3],
        atol=1e-4,
    ),
    "aten::native_layer_norm.out": Case(aten.native_layer_norm, lambda: [X(), [5], _r(5), _r(5), 1e-5]),
    "aten::native_layer_norm_backward.out": Case(
        aten.native_layer_norm_backward,
        lambda: [_r(3, 4, 5, seed=1), X(), [5], *LN_STATS()[1:], _r(5), _r(5), [True] * 3],
        atol=1e-4,
    ),
    "aten::sort.values": Case(aten.sort, lambda: [X(), 1, True]),
    "aten::sort.values_stable": Case(
        lambda x, stable, dim, descending: aten.sort.stable(x, stable=stable, dim=dim, descending=descending),
        lambda: [_ints(3, 4, 5), True, -1, False],
    ),
    "aten::std_mean.correction_out": Case(
        lambda x, dim, correction, keepdim: aten.std_mean.correction(x, dim, correction=correction, keepdim=keepdim),
        lambda: [X(), [1], 1, False],
    ),
    "aten::var_mean.correction_out": Case(
        lambda x, dim, correction, keepdim: aten.var_mean.correction(x, dim, correction=correction, keepdim=keepdim),
        lambda: [X(), [0, 2], 0, True],
    ),
    "aten::topk.values": Case(aten.topk, lambda: [X(), 3, -1, True, True]),
    "aten::split_copy.Tensor_out": Case(aten.split_copy.Tensor, lambda: [X(), 2, 1]),
    "aten::split_with_sizes_copy.out": Case(aten.split_with_sizes_copy, lambda: [X(), [1, 4], -1]),
    "aten::unbind_copy.int_out": Case(aten.unbind_copy.int, lambda: [X(), 1]),
    # linear algebra, histograms and unique (issue 16's kernels)
    "aten::_linalg_det.result": Case(aten._linalg_det, lambda: [_square()], atol=1e-4),
    "aten::_histogramdd_bin_edges.out": Case(
        lambda x, bins, rng, weight, density: aten._histogramdd_bin_edges(
            x, bins, range=rng, weight=weight, density=density
        ),
        lambda: [_r(10, 3), [3, 4, 2], None, None, False],
    ),
    "aten::_linalg_eigh.eigenvalues": Case(aten._linalg_eigh, lambda: [_spd(), "L", True], atol=1e-4),
    "aten::_linalg_slogdet.sign": Case(aten._linalg_slogdet, lambda: [_square()], atol=1e-4),
    "aten::_linalg_solve_ex.result": Case(
        lambda a, b, left, check: aten._linalg_solve_ex(a, b, left=left, check_errors=check),
        lambda: [_square(), _r(2, 3, 2), True, False],
        atol=1e-4,
    ),
    "aten::_linalg_svd.U": Case(
        lambda a, full, uv, driver: aten._linalg_svd(a, full, uv, driver=driver),
        lambda: [_square(), False, True, None],
        atol=1e-4,
    ),
    "aten::geqrf.a": Case(aten.geqrf, lambda: [_square()], atol=1e-4),
    "aten::linalg_cholesky_ex.L": Case(
        lambda a, upper, check: aten.linalg_cholesky_ex(a, upper=upper, check_errors=check),
        lambda: [_spd(), False, False],
        atol=1e-4,
    ),
    "aten::linalg_inv_ex.inverse": Case(
        lambda a, check: aten.linalg_inv_ex(a, check_errors=check), lambda: [_square(), False], atol=1e-4
    ),
    "aten::linalg_lstsq.out": Case(
        lambda a, b, rcond, driver: aten.linalg_lstsq(a, b, rcond, driver=driver),
        lambda: [_r(5, 3) + torch.eye(5, 3), _r(5, 2), None, "gelsd"],
        atol=1e-4,
    ),
    "aten::linalg_lu.out": Case(lambda a, pivot: aten.linalg_lu(a, pivot=pivot), lambda: [_square(), True], atol=1e-4),
    "aten::linalg_lu_factor_ex.out": Case(
        lambda a, pivot, check: aten.linalg_lu_factor_ex(a, pivot=pivot, check_errors=check),
        lambda: [_square(), True, False],
        atol=1e-4,
    ),
    "aten::linalg_qr.out": Case(aten.linalg_qr, lambda: [_square(), "reduced"], atol=1e-4),
    "aten::lu_unpack.out": Case(aten.lu_unpack, lambda: [*aten.linalg_lu_factor(_square()), True, True], atol=1e-4),
    "aten::triangular_solve.X": Case(
        aten.triangular_solve, lambda: [_r(2, 3, 2), _square().triu(), True, False, False], atol=1e-4
    ),
    "aten::frexp.Tensor_out": Case(aten.frexp, lambda: [X()]),
    "aten::histogram.bin_ct_out": Case(
        lambda x, bins, range_, weight, density: aten.histogram.bin_ct(
            x, bins, range=range_, weight=weight, density=density
        ),
        lambda: [_r(20), 5, None, None, False],
    ),
    "aten::histogram.bins_tensor_out": Case(
        lambda x, bins, weight, density: aten.histogram.bins_tensor(x, bins, weight=weight, density=density),
        lambda: [_r(20), torch.tensor([-2.0, -0.5, 0.0, 0.5, 2.0]), None, False],
    ),
    "aten::_unique2.out": Case(aten._unique2, lambda: [_ints(3, 4, 5), True, True, True]),
    "aten::unique_consecutive.out": Case(
        lambda x, inverse, counts, dim: aten.unique_consecutive(
            x, return_inverse=inverse, return_counts=counts, dim=dim
        ),
        lambda: [_ints(3, 4, 5), True, True, None],
    ),
    "aten::unique_dim.out": Case(aten.unique_dim, lambda: [_ints(6, 2), 0, True, True, True]),
}

# The quantized ops' schemas are not in this torch; their shapes are known: a one-element or per-token tensor each.
QUANTIZED: dict[str, tuple[list, list[tuple[tuple[int, ...], np.dtype]]]] = {
    "quantized_decomposed::choose_qparams.Tensor_out": (
        [np.linspace(-2, 3, 60, dtype=np.float32).reshape(3, 4, 5), -128, 127, 1e-7, 1],
        [((1,), np.float64), ((1,), np.int64)],
    ),
    "quantized_decomposed::choose_qparams_per_token_asymmetric.out": (
        [np.linspace(-2, 3, 60, dtype=np.float32).reshape(3, 4, 5), 1],
        [((3, 4, 1), np.float64), ((3, 4, 1), np.int64)],
    ),
}


def _multi_output_kernels() -> set[str]:
    found = set(QUANTIZED)
    for name in KERNELS:
        namespace, rest = name.split("::")
        op, _, overload = rest.partition(".")
        try:
            schema = getattr(getattr(getattr(torch.ops, namespace), op), overload or "default")._schema
        except (AttributeError, RuntimeError):
            continue
        outs = [a for a in schema.arguments if a.is_out]
        if len(outs) > 1 or any(isinstance(a.type, torch.ListType) for a in outs):
            found.add(name)
    return found


def test_every_multi_output_kernel_is_checked():
    assert _multi_output_kernels() == set(CASES) | set(QUANTIZED)


def _slot(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An upper-bound slot: one more in every dimension than the result, filled with a sentinel."""
    return np.full(tuple(s + 1 for s in shape), 7, dtype)


def _starts_at(got: np.ndarray, slot: np.ndarray) -> bool:
    return got.__array_interface__["data"][0] == slot.__array_interface__["data"][0]


def _check(got: object, slots: list[np.ndarray], wants: list[np.ndarray], atol: float) -> None:
    assert isinstance(got, (tuple, list)) and len(got) == len(slots), f"returned {type(got).__name__}"
    for i, (g, slot, want) in enumerate(zip(got, slots, wants)):
        assert g.shape == want.shape, f"out {i}: shape {g.shape}, torch gives {want.shape}"
        assert _starts_at(g, slot), f"out {i} does not start at its planned slot"
        np.testing.assert_allclose(g.astype(np.float64), want.astype(np.float64), atol=atol, err_msg=f"out {i}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_out_is_resized_in_its_slot(name: str):
    case = CASES[name]
    want = case.reference(*case.args())
    wants = [to_numpy(w) for w in want]
    slots = [_slot(w.shape, w.dtype) for w in wants]
    fn, nargs = KERNELS[name]
    np_args = to_numpy(case.args())
    listed = nargs == len(np_args) + 1  # one TensorList out
    got = fn(*np_args, slots) if listed else fn(*np_args, *slots)
    _check(got, slots, wants, case.atol)


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_each_quantized_out_is_resized_in_its_slot(name: str):
    args, outs = QUANTIZED[name]
    fn, _ = KERNELS[name]
    wants = list(fn(*args, *[np.empty(shape, dtype) for shape, dtype in outs]))
    slots = [_slot(shape, dtype) for shape, dtype in outs]
    _check(fn(*args, *slots), slots, wants, 0.0)
