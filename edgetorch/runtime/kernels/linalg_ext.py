"""Linear-algebra kernels beyond matrix products: inverse, solve, determinant, Cholesky, QR, SVD, symmetric
eigendecomposition, LU (factor, solve, unpack), triangular solve, matrix exponential, Householder products,
pseudo-inverse and least squares, LDL^T.

Every kernel is batched over leading dims like torch.linalg. Factorizations whose outputs torch returns in
LAPACK's packed form (LU + 1-based pivots, geqrf's reflectors, sytrf's LD + pivots) are computed here by
the same unblocked algorithms (partial pivoting, Householder with LAPACK's sign convention, Bunch-Kaufman),
so the packed outputs match; the rest call numpy.linalg (LAPACK). float16/bfloat16 compute in float32.
Imports only NumPy and the runtime.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np

from edgetorch.runtime.kernels.linalg import upcast
from edgetorch.runtime.kernels.registry import kernel
from edgetorch.runtime.memory import resize


def _store(out: np.ndarray, value: np.ndarray) -> np.ndarray:
    out = resize(out, np.shape(value))
    np.copyto(out, value, casting="unsafe")
    return out


def _square(a: np.ndarray, op: str) -> np.ndarray:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"{op}: expected a batch of square matrices, got shape {a.shape}")
    return upcast(a)


def _mT(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a, -1, -2)


# ---------------------------------------------------------------------------------------------
# LU with partial pivoting (LAPACK getf2): the column's largest |value| (first on ties) becomes the pivot.


def lu_factor(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed LU of a batch of m x n matrices, LAPACK's 1-based int32 pivots, and info (first zero pivot, 1-based)."""
    lu: np.ndarray = np.array(a, dtype=np.float64 if a.dtype == np.float64 else np.float32, copy=True)
    m, n = lu.shape[-2:]
    batch = lu.shape[:-2]
    flat = lu.reshape(math.prod(batch), m, n)  # not -1: an empty matrix has no size to infer from
    k = min(m, n)
    pivots = np.zeros((flat.shape[0], k), np.int32)
    info = np.zeros(flat.shape[0], np.int32)
    rows = np.arange(flat.shape[0])
    for j in range(k):
        p = j + np.argmax(np.abs(flat[:, j:, j]), axis=1)
        pivots[:, j] = p + 1
        swap = p != j
        if swap.any():
            r = rows[swap]
            saved = flat[r, j, :].copy()
            flat[r, j, :] = flat[r, p[swap], :]
            flat[r, p[swap], :] = saved
        pivot = flat[:, j, j]
        zero = pivot == 0
        info = np.where(zero & (info == 0), j + 1, info)
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = np.where(zero, 1.0, 1.0 / np.where(zero, 1.0, pivot)).astype(flat.dtype)
        flat[:, j + 1 :, j] *= scale[:, None]
        flat[:, j + 1 :, j + 1 :] -= flat[:, j + 1 :, j : j + 1] * flat[:, j : j + 1, j + 1 :]
    return flat.reshape(lu.shape), pivots.reshape(*batch, k), info.reshape(batch)


def _permutation(pivots: np.ndarray, m: int) -> np.ndarray:
    """The row permutation (perm[i] = original row in position i) that LAPACK's sequential swaps describe."""
    flat = pivots.reshape(-1, pivots.shape[-1]).astype(np.int64) - 1
    perm = np.tile(np.arange(m), (flat.shape[0], 1))
    rows = np.arange(flat.shape[0])
    for j in range(flat.shape[1]):
        p = flat[:, j]
        a, b = perm[rows, j].copy(), perm[rows, p].copy()
        perm[rows, j], perm[rows, p] = b, a
    return perm.reshape(*pivots.shape[:-1], m)


def _unpack(lu: np.ndarray, pivots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m, n = lu.shape[-2:]
    k = min(m, n)
    lower = np.tril(lu[..., :, :k], -1) + np.eye(m, k, dtype=lu.dtype)
    upper = np.triu(lu[..., :k, :])
    perm = _permutation(pivots, m)
    p = np.zeros((*perm.shape, m), lu.dtype)
    np.put_along_axis(p, perm[..., :, None], 1, axis=-1)  # p[i, perm[i]] = 1: rows of A in LU order
    return _mT(p), lower, upper


def _lu_solve(lu: np.ndarray, pivots: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Solve A X = B given A's packed LU."""
    perm = _permutation(pivots, lu.shape[-1])
    shape = np.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    pb = np.take_along_axis(
        np.broadcast_to(b, shape + b.shape[-2:]), np.broadcast_to(perm, shape + perm.shape[-1:])[..., None], axis=-2
    )
    n = lu.shape[-1]
    lower = np.tril(lu, -1) + np.eye(n, dtype=lu.dtype)
    y = _triangular_solve(lower, pb, upper=False, unit=True)
    return _triangular_solve(np.triu(lu), y, upper=True, unit=False)


def _triangular_solve(a: np.ndarray, b: np.ndarray, upper: bool, unit: bool) -> np.ndarray:
    """Solve A X = B for triangular A by substitution, batched over leading dims and right-hand sides."""
    n = a.shape[-1]
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, shape + a.shape[-2:])
    x = np.array(np.broadcast_to(b, shape + b.shape[-2:]), dtype=np.result_type(a, b), copy=True)
    order = range(n - 1, -1, -1) if upper else range(n)
    with np.errstate(all="ignore"):
        for i in order:
            if upper:
                x[..., i, :] -= np.einsum("...k,...kj->...j", a[..., i, i + 1 :], x[..., i + 1 :, :])
            else:
                x[..., i, :] -= np.einsum("...k,...kj->...j", a[..., i, :i], x[..., :i, :])
            if not unit:
                x[..., i, :] /= a[..., i, i : i + 1]
    return x


@kernel("aten::linalg_lu_factor_ex.out")
def linalg_lu_factor_ex(
    A: np.ndarray, pivot: bool, check_errors: bool, LU: np.ndarray, pivots: np.ndarray, info: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packed LU factorization with partial pivoting, LAPACK's pivots, and info (> 0: exactly singular)."""
    if not pivot:
        raise ValueError("linalg.lu_factor: pivot=False is only supported on CUDA (as in torch)")
    lu, piv, inf = lu_factor(upcast(A))
    if check_errors and np.any(inf > 0):
        raise ValueError("linalg.lu_factor: the factorization could not be completed because the input is singular")
    return _store(LU, lu), _store(pivots, piv), _store(info, inf)


@kernel("aten::linalg_lu.out")
def linalg_lu(A: np.ndarray, pivot: bool, P: np.ndarray, L: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, ...]:
    """A = P L U with L unit lower triangular (m x k) and U upper triangular (k x n)."""
    if not pivot:
        raise ValueError("linalg.lu: pivot=False is only supported on CUDA (as in torch)")
    lu, piv, _ = lu_factor(upcast(A))
    p, lower, upper = _unpack(lu, piv)
    return _store(P, p), _store(L, lower), _store(U, upper)


@kernel("aten::lu_unpack.out")
def lu_unpack(
    LU_data: np.ndarray,
    LU_pivots: np.ndarray,
    unpack_data: bool,
    unpack_pivots: bool,
    P: np.ndarray,
    L: np.ndarray,
    U: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """P, L and U from a packed LU and its pivots (empty outputs for the parts not asked for)."""
    p, lower, upper = _unpack(upcast(LU_data), LU_pivots)
    empty = np.zeros((0,), lower.dtype)
    return (
        _store(P, p if unpack_pivots else empty),
        _store(L, lower if unpack_data else empty),
        _store(U, upper if unpack_data else empty),
    )


@kernel("aten::linalg_lu_solve.out")
def linalg_lu_solve(
    LU: np.ndarray, pivots: np.ndarray, B: np.ndarray, left: bool, adjoint: bool, out: np.ndarray
) -> np.ndarray:
    """Solve A X = B (or X A = B, or with A^T) from A's packed LU."""
    lu = upcast(LU)
    b = upcast(B)
    if left and not adjoint:
        return _store(out, _lu_solve(lu, pivots, b))
    a = np.matmul(*_unpack(lu, pivots)[:2]) @ np.triu(lu)  # reassemble A = P L U, then solve directly
    a = _mT(a) if adjoint else a
    if left:
        return _store(out, np.linalg.solve(a, b))
    return _store(out, _mT(np.linalg.solve(_mT(a), _mT(b))))


@kernel("aten::_linalg_det.result")
def linalg_det(A: np.ndarray, result: np.ndarray, LU: np.ndarray, pivots: np.ndarray) -> tuple[np.ndarray, ...]:
    """det(A) as the product of U's diagonal and the permutation's sign, with the LU it came from.

    Like torch, the LU returned is that of A^T (A's memory read column-major, as LAPACK does); det is the same.
    """
    lu, piv, _ = lu_factor(_mT(_square(A, "linalg.det")))
    det = _det_from_lu(lu, piv)
    return _store(result, det), _store(LU, lu), _store(pivots, piv)


def _det_from_lu(lu: np.ndarray, piv: np.ndarray) -> np.ndarray:
    n = lu.shape[-1]
    swaps = np.sum(piv != np.arange(1, n + 1), axis=-1)
    sign = np.where(swaps % 2 == 1, -1.0, 1.0)
    return sign * np.prod(np.diagonal(lu, axis1=-2, axis2=-1), axis=-1)


@kernel("aten::_linalg_slogdet.sign")
def linalg_slogdet(
    A: np.ndarray, sign: np.ndarray, logabsdet: np.ndarray, LU: np.ndarray, pivots: np.ndarray
) -> tuple[np.ndarray, ...]:
    """sign(det A) and log|det A| (summed logs of U's diagonal, so no overflow), with the LU of A^T (as det)."""
    lu, piv, _ = lu_factor(_mT(_square(A, "linalg.slogdet")))
    diag = np.diagonal(lu, axis1=-2, axis2=-1)
    n = lu.shape[-1]
    swaps = np.sum(piv != np.arange(1, n + 1), axis=-1)
    s = np.where(swaps % 2 == 1, -1.0, 1.0) * np.prod(np.sign(diag), axis=-1)
    with np.errstate(divide="ignore"):
        logdet = np.sum(np.log(np.abs(diag)), axis=-1)
    return _store(sign, s), _store(logabsdet, logdet), _store(LU, lu), _store(pivots, piv)


@kernel("aten::linalg_inv_ex.inverse")
def linalg_inv_ex(A: np.ndarray, check_errors: bool, inverse: np.ndarray, info: np.ndarray) -> tuple[np.ndarray, ...]:
    """A^-1 and info (> 0 where A is singular; its inverse is then NaN)."""
    a = _square(A, "linalg.inv")
    _, _, inf = lu_factor(a)
    if check_errors and np.any(inf > 0):
        raise ValueError("linalg.inv: the matrix is singular, it has no inverse")
    safe = np.where((inf > 0)[..., None, None], np.eye(a.shape[-1], dtype=a.dtype), a)
    inv = np.where((inf > 0)[..., None, None], np.nan, np.linalg.inv(safe))
    return _store(inverse, inv), _store(info, inf)


@kernel("aten::_linalg_solve_ex.result")
def linalg_solve_ex(
    A: np.ndarray,
    B: np.ndarray,
    left: bool,
    check_errors: bool,
    result: np.ndarray,
    LU: np.ndarray,
    pivots: np.ndarray,
    info: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """X with A X = B (or X A = B when not ``left``), and A's LU, pivots and info; B may be a vector."""
    a, b = _square(A, "linalg.solve"), upcast(B)
    lu, piv, inf = lu_factor(a)
    if check_errors and np.any(inf > 0):
        raise ValueError("linalg.solve: the matrix A is singular")
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    rhs = b[..., None] if vector else b
    if left:
        x = _lu_solve(lu, piv, rhs)
    else:
        x = _mT(np.linalg.solve(_mT(a), _mT(rhs)))
    x = x[..., 0] if vector else x
    return _store(result, x), _store(LU, lu), _store(pivots, piv), _store(info, inf)


@kernel("aten::linalg_solve_triangular.out")
def linalg_solve_triangular(
    self: np.ndarray, B: np.ndarray, upper: bool, left: bool, unitriangular: bool, out: np.ndarray
) -> np.ndarray:
    """X with A X = B (or X A = B) for triangular A (only its ``upper`` or lower triangle is read)."""
    a, b = upcast(self), upcast(B)
    tri = np.triu(a) if upper else np.tril(a)
    if left:
        return _store(out, _triangular_solve(tri, b, upper, unitriangular))
    return _store(out, _mT(_triangular_solve(_mT(tri), _mT(b), not upper, unitriangular)))


@kernel("aten::triangular_solve.X")
def triangular_solve(
    self: np.ndarray,
    A: np.ndarray,
    upper: bool,
    transpose: bool,
    unitriangular: bool,
    X: np.ndarray,
    M: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The legacy triangular_solve: X with op(A) X = self, and a copy of A (broadcast)."""
    a, b = upcast(A), upcast(self)
    tri = np.triu(a) if upper else np.tril(a)
    if transpose:
        tri, upper = _mT(tri), not upper
    x = _triangular_solve(tri, b, upper, unitriangular)
    shape = x.shape[:-2] + a.shape[-2:]
    return _store(X, x), _store(M, np.broadcast_to(a, shape))


# ---------------------------------------------------------------------------------------------
# Cholesky.


def _cholesky(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower Cholesky factors and info (the order of the first non-positive leading minor, else 0)."""
    flat = a.reshape(-1, *a.shape[-2:])
    factors = np.zeros_like(flat)
    info = np.zeros(len(flat), np.int32)
    for i, m in enumerate(flat):
        try:
            factors[i] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            info[i] = _first_bad_minor(m)
            factors[i] = np.nan
    return factors.reshape(a.shape), info.reshape(a.shape[:-2])


def _first_bad_minor(m: np.ndarray) -> int:
    for k in range(1, m.shape[0] + 1):
        try:
            np.linalg.cholesky(m[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return 0


@kernel("aten::linalg_cholesky_ex.L")
def linalg_cholesky_ex(
    self: np.ndarray, upper: bool, check_errors: bool, L: np.ndarray, info: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The Cholesky factor of a symmetric positive-definite matrix (its lower triangle is read)."""
    factor, inf = _cholesky(_square(self, "linalg.cholesky"))
    if check_errors and np.any(inf > 0):
        raise ValueError("linalg.cholesky: the input is not positive-definite")
    return _store(L, _mT(factor) if upper else factor), _store(info, inf)


@kernel("aten::cholesky.out")
def cholesky(self: np.ndarray, upper: bool, out: np.ndarray) -> np.ndarray:
    """The legacy torch.cholesky: the lower (or upper) Cholesky factor."""
    factor, inf = _cholesky(_square(self, "cholesky"))
    if np.any(inf > 0):
        raise ValueError("cholesky: the input is not positive-definite")
    return _store(out, _mT(factor) if upper else factor)


@kernel("aten::cholesky_solve.out")
def cholesky_solve(self: np.ndarray, input2: np.ndarray, upper: bool, out: np.ndarray) -> np.ndarray:
    """X with A X = B, given B (``self``) and A's Cholesky factor (``input2``)."""
    factor, b = upcast(input2), upcast(self)
    lower = _mT(factor) if upper else factor
    y = _triangular_solve(np.tril(lower), b, upper=False, unit=False)
    return _store(out, _triangular_solve(np.triu(_mT(lower)), y, upper=True, unit=False))


@kernel("aten::cholesky_inverse.out")
def cholesky_inverse(self: np.ndarray, upper: bool, out: np.ndarray) -> np.ndarray:
    """A^-1 from A's Cholesky factor."""
    factor = upcast(self)
    lower = _mT(np.triu(factor)) if upper else np.tril(factor)
    inv_lower = _triangular_solve(
        lower, np.broadcast_to(np.eye(lower.shape[-1], dtype=lower.dtype), lower.shape), False, False
    )
    return _store(out, _mT(inv_lower) @ inv_lower)


# ---------------------------------------------------------------------------------------------
# QR, SVD, eigh (LAPACK through numpy.linalg) and the Householder family (geqrf's packed form).


@kernel("aten::linalg_qr.out")
def linalg_qr(A: np.ndarray, mode: str, Q: np.ndarray, R: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A = Q R; ``mode`` 'reduced', 'complete' or 'r' (Q then empty)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"linalg.qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    a = upcast(A)
    if mode == "r":
        return _store(Q, np.zeros((0,), a.dtype)), _store(R, np.linalg.qr(a, mode="r"))  # type: ignore[arg-type]  # NumPy's stubs type qr(mode="r") as QRResult; it returns R alone
    q, r = np.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    return _store(Q, q), _store(R, r)


@kernel("aten::_linalg_svd.U")
def linalg_svd(
    A: np.ndarray,
    full_matrices: bool,
    compute_uv: bool,
    driver: str | None,
    U: np.ndarray,
    S: np.ndarray,
    Vh: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A = U diag(S) Vh, singular values descending (U and Vh empty when not ``compute_uv``)."""
    a = upcast(A)
    if not compute_uv:
        empty = np.zeros((0,), a.dtype)
        return _store(U, empty), _store(S, np.linalg.svd(a, compute_uv=False)), _store(Vh, empty)
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    return _store(U, u), _store(S, s), _store(Vh, vh)


@kernel("aten::_linalg_eigh.eigenvalues")
def linalg_eigh(
    A: np.ndarray, UPLO: str, compute_v: bool, eigenvalues: np.ndarray, eigenvectors: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix, reading its ``UPLO`` triangle."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"linalg.eigh: UPLO must be 'L' or 'U', got {UPLO!r}")
    a = _square(A, "linalg.eigh")
    uplo: Literal["L", "U"] = "L" if UPLO == "L" else "U"
    if not compute_v:
        return _store(eigenvalues, np.linalg.eigvalsh(a, UPLO=uplo)), _store(eigenvectors, np.zeros((0,), a.dtype))
    w, v = np.linalg.eigh(a, UPLO=uplo)
    return _store(eigenvalues, w), _store(eigenvectors, v)


def _geqrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """LAPACK geqr2: Householder QR, R in the upper triangle, reflectors v (v_0 = 1 implied) below, and tau.

    Each reflector H = I - tau v v^T maps the column x to (beta, 0, ...), beta = -sign(x_0) ||x||.
    """
    r = np.array(a, copy=True)
    m, n = r.shape[-2:]
    k = min(m, n)
    tau = np.zeros((*r.shape[:-2], k), r.dtype)
    for j in range(k):
        x = r[..., j:, j]
        alpha = x[..., 0].copy()
        norm_rest = np.linalg.norm(x[..., 1:], axis=-1)
        reflect = norm_rest != 0
        beta = -np.copysign(np.hypot(alpha, norm_rest), alpha)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(reflect, (beta - alpha) / beta, 0)
            scale = np.where(reflect, 1 / (alpha - beta), 0)
        v = np.concatenate([np.ones_like(alpha)[..., None], x[..., 1:] * scale[..., None]], axis=-1)
        tau[..., j] = t
        trailing = r[..., j:, j + 1 :]
        w = np.einsum("...i,...ij->...j", v, trailing)
        r[..., j:, j + 1 :] = trailing - t[..., None, None] * v[..., :, None] * w[..., None, :]
        r[..., j, j] = np.where(reflect, beta, alpha)
        r[..., j + 1 :, j] = v[..., 1:]
    return r, tau


def _householder_q(reflectors: np.ndarray, tau: np.ndarray, columns: int) -> np.ndarray:
    """The first ``columns`` columns of H_1 H_2 ... H_k (LAPACK orgqr), reflectors below the diagonal."""
    m = reflectors.shape[-2]
    q = np.broadcast_to(np.eye(m, columns, dtype=reflectors.dtype), (*reflectors.shape[:-2], m, columns)).copy()
    for j in reversed(range(tau.shape[-1])):
        v = np.concatenate(
            [
                np.zeros((*reflectors.shape[:-2], j), reflectors.dtype),
                np.ones((*reflectors.shape[:-2], 1), reflectors.dtype),
                reflectors[..., j + 1 :, j],
            ],
            axis=-1,
        )
        w = np.einsum("...i,...ij->...j", v, q)
        q -= tau[..., j, None, None] * v[..., :, None] * w[..., None, :]
    return q


@kernel("aten::geqrf.a")
def geqrf(self: np.ndarray, a: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """QR in LAPACK's packed form: R and the Householder reflectors in one matrix, plus their scales tau."""
    packed, t = _geqrf(upcast(self))
    return _store(a, packed), _store(tau, t)


@kernel("aten::linalg_householder_product.out")
def linalg_householder_product(input: np.ndarray, tau: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The first n columns of the product of the Householder reflectors stored in ``input`` (m x n) and ``tau``."""
    a = upcast(input)
    return _store(out, _householder_q(a, upcast(tau), a.shape[-1]))


@kernel("aten::ormqr.out")
def ormqr(
    self: np.ndarray, input2: np.ndarray, input3: np.ndarray, left: bool, transpose: bool, out: np.ndarray
) -> np.ndarray:
    """op(Q) C or C op(Q), Q the full m x m product of the reflectors in ``self`` with scales ``input2``."""
    a, tau, c = upcast(self), upcast(input2), upcast(input3)
    q = _householder_q(a, tau, a.shape[-2])
    q = _mT(q) if transpose else q
    return _store(out, q @ c if left else c @ q)


# ---------------------------------------------------------------------------------------------
# Matrix exponential, pseudo-inverse, least squares.


def _pade13() -> list[float]:
    """Coefficients of the [13/13] Pade approximant of exp: b_k = (26 - k)! 13! / (26! k! (13 - k)!)."""
    m = 13
    return [
        math.factorial(2 * m - k)
        * math.factorial(m)
        / (math.factorial(2 * m) * math.factorial(k) * math.factorial(m - k))
        for k in range(m + 1)
    ]


@kernel("aten::linalg_matrix_exp.out")
def linalg_matrix_exp(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """exp(A) by scaling and squaring with the [13/13] Pade approximant (Higham 2005, theta_13 = 5.37)."""
    a = _square(self, "linalg.matrix_exp").astype(np.float64)
    n = a.shape[-1]
    norm = np.max(np.sum(np.abs(a), axis=-2), axis=-1) if a.size else np.zeros(a.shape[:-2])
    with np.errstate(divide="ignore"):
        s = np.maximum(0, np.ceil(np.log2(np.maximum(norm, 1e-300) / 5.37))).astype(np.int64)
    a = a / np.exp2(s)[..., None, None]
    b = _pade13()
    eye = np.broadcast_to(np.eye(n), a.shape)
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    flat_r, flat_s = r.reshape(-1, n, n), s.reshape(-1)
    for i in range(len(flat_r)):
        for _ in range(int(flat_s[i])):
            flat_r[i] = flat_r[i] @ flat_r[i]
    return _store(out, flat_r.reshape(r.shape))


def _cutoff(
    s: np.ndarray, atol: np.ndarray | float | None, rtol: np.ndarray | float | None, shape: tuple
) -> np.ndarray:
    """torch's singular-value threshold max(atol, rtol * sigma_max); rtol defaults to eps * max(m, n) without atol."""
    if rtol is None:
        rtol = np.finfo(s.dtype).eps * max(shape[-2:]) if atol is None or np.all(np.asarray(atol) <= 0) else 0.0
    atol = 0.0 if atol is None else atol
    smax = s[..., :1] if s.shape[-1] else np.zeros((*s.shape[:-1], 1), s.dtype)
    return np.maximum(np.asarray(atol)[..., None], np.asarray(rtol)[..., None] * smax)


def _pinv(a: np.ndarray, atol, rtol, hermitian: bool) -> np.ndarray:
    if hermitian:
        w, v = np.linalg.eigh(a)
        absw = np.abs(w)
        order = np.argsort(-absw, axis=-1)
        cutoff = _cutoff(np.take_along_axis(absw, order, -1), atol, rtol, a.shape)
        inv = np.where(absw > cutoff, 1 / np.where(absw > cutoff, w, 1), 0)
        return (v * inv[..., None, :]) @ _mT(v)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    cutoff = _cutoff(s, atol, rtol, a.shape)
    inv = np.where(s > cutoff, 1 / np.where(s > cutoff, s, 1), 0)
    return (_mT(vh) * inv[..., None, :]) @ _mT(u)


@kernel("aten::linalg_pinv.atol_rtol_tensor_out", "aten::linalg_pinv.atol_rtol_float_out")
def linalg_pinv(
    self: np.ndarray, atol: np.ndarray | float | None, rtol: np.ndarray | float | None, hermitian: bool, out: np.ndarray
) -> np.ndarray:
    """The Moore-Penrose pseudo-inverse, dropping singular values at or below max(atol, rtol * sigma_max)."""
    return _store(out, _pinv(upcast(self), atol, rtol, hermitian))


@kernel("aten::linalg_pinv.out", "aten::linalg_pinv.out_rcond_tensor")
def linalg_pinv_rcond(self: np.ndarray, rcond: np.ndarray | float, hermitian: bool, out: np.ndarray) -> np.ndarray:
    """The pseudo-inverse with a relative cutoff ``rcond``."""
    return _store(out, _pinv(upcast(self), None, rcond, hermitian))


@kernel("aten::linalg_lstsq.out")
def linalg_lstsq(
    self: np.ndarray,
    b: np.ndarray,
    rcond: float | None,
    driver: str | None,
    solution: np.ndarray,
    residuals: np.ndarray,
    rank: np.ndarray,
    singular_values: np.ndarray,
) -> tuple[np.ndarray, ...]:
    """Least-squares solution of A X = B (torch's CPU default driver 'gelsy': no residuals or singular values)."""
    a, rhs = upcast(self), upcast(b)
    driver = driver or "gelsy"
    vector = rhs.ndim == a.ndim - 1
    rhs = rhs[..., None] if vector else rhs
    shape = np.broadcast_shapes(a.shape[:-2], rhs.shape[:-2])
    a_b, b_b = np.broadcast_to(a, shape + a.shape[-2:]), np.broadcast_to(rhs, shape + rhs.shape[-2:])
    m, n = a.shape[-2:]
    cut = rcond if rcond is not None and rcond > 0 else np.finfo(a.dtype).eps * max(m, n)
    x = np.zeros(shape + (n, rhs.shape[-1]), a.dtype)
    ranks = np.zeros(shape, np.int64)
    svals = np.zeros(shape + (min(m, n),), a.dtype)
    for idx in np.ndindex(*shape):
        x[idx], _, ranks[idx], svals[idx] = np.linalg.lstsq(a_b[idx], b_b[idx], rcond=cut)
    x = x[..., 0] if vector else x
    # Residuals (squared, per column) exist for tall problems, except with gelsy, and need full rank where
    # the driver computes ranks; rank comes from every driver but gels, singular values from gelsd/gelss only.
    full_rank = driver == "gels" or bool(np.all(ranks == n))
    if m > n and driver != "gelsy" and full_rank:
        res = np.sum((np.matmul(a_b, x[..., None] if vector else x) - b_b) ** 2, axis=-2)
        res = res[..., 0] if vector else res
    else:
        res = np.zeros((0,), a.dtype)
    if driver not in ("gelsd", "gelss"):
        svals = np.zeros((0,), a.dtype)
    if driver == "gels":
        ranks = np.zeros((0,), np.int64)
    return _store(solution, x), _store(residuals, res), _store(rank, ranks), _store(singular_values, svals)


@kernel("aten::dist.out")
def dist(self: np.ndarray, other: np.ndarray, p: float, out: np.ndarray) -> np.ndarray:
    """The ``p``-norm of ``self - other`` (broadcast) as a 0-D tensor: ``p`` = 0 counts non-zeros, +-inf is the
    largest / smallest absolute difference."""
    diff = np.abs(np.subtract(self, other, dtype=np.float64))
    if diff.size == 0:
        value = 0.0
    elif p == 0:
        value = float(np.count_nonzero(diff))
    elif p == math.inf:
        value = diff.max()
    elif p == -math.inf:
        value = diff.min()
    else:
        value = np.sum(diff**p) ** (1.0 / p)
    out = resize(out, ())
    np.copyto(out, value, casting="unsafe")
    return out


@kernel("aten::_trilinear.out")
def trilinear(
    i1: np.ndarray,
    i2: np.ndarray,
    i3: np.ndarray,
    expand1: list[int],
    expand2: list[int],
    expand3: list[int],
    sumdim: list[int],
    unroll_dim: int,
    out: np.ndarray,
) -> np.ndarray:
    """``sum over sumdim of i1 * i2 * i3``, each input first given size-1 dims at its ``expand`` positions (the
    kernel of ``nn.functional.bilinear``); ``unroll_dim`` only picks torch's loop order."""
    operands = [
        np.expand_dims(upcast(x), sorted(e)) if e else upcast(x)
        for x, e in ((i1, expand1), (i2, expand2), (i3, expand3))
    ]
    product = operands[0] * operands[1] * operands[2]
    value = product.sum(axis=tuple(sumdim)) if sumdim else product
    out = resize(out, value.shape)
    np.copyto(out, value, casting="unsafe")
    return out
