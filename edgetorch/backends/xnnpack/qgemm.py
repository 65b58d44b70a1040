"""Integer GEMMs for the quantized XNNPACK nodes, computed exactly with float32 BLAS.

NumPy has no fast integer matrix product (an int32 ``matmul`` runs a plain loop, orders of magnitude
slower than BLAS), so the quantized fully connected and convolution nodes multiply integer-valued float32
arrays with sgemm. Why that gives XNNPACK's int32 accumulator bit for bit:

* float32 represents every integer of magnitude up to 2**24 exactly, and the sum, product or fused
  multiply-add of such integers is exact whenever the exact result is also at most 2**24 in
  magnitude: there is nothing to round.
* Every intermediate value of a dot product ``sum_k x[k] * w[k, n]``, in whatever order BLAS
  blocks, vectorises or fuses it, is a partial sum of a subset of the terms, so its magnitude is at
  most ``sum_k |x[k]| * |w[k, n]| <= X * L1(w[:, n])`` where X bounds the inputs. If that bound
  is at most 2**24 for every output column n, the sgemm is exact.
* The bound uses each column's L1 norm, known when the weights are loaded, not the worst case
  ``K * 127 * X``: int8 weights of trained or random layers have a mean magnitude of 20-40, so a
  K = 1024 fully connected has L1 norms near 30,000 and with X = 256 stays below 2**24 = 16.8M
  with room to spare, where the worst-case bound would have stopped at K = 512.
* A column whose bound is too large is cut along K into chunks that each satisfy it
  (``exact_splits``); each chunk's sgemm is exact and the chunks are summed in float64, exact
  below 2**53.

The bias (int32) rides along as one more weight row multiplied by a column of ones, so it is
added inside the same sgemm and counted in the same bound.

Measured against float64 dgemm and NumPy's int32 ``matmul`` (docs/benchmarks.md, "Integer GEMM options"),
sgemm wins on every shape, and the choice per shape is how many K-chunks its L1 bound needs. The
static fully connected nodes take that choice. Static convolutions run one sgemm through the float
planner's im2col; where a deep convolution's bound fails, a partial sum above 2**24 may round by a
relative 6e-8, which moves the requantized output only at a rounding tie, within the one step the
outputs are held to.
Dequantize-then-sgemm (weights times their scales once, at
load) costs what the exact sgemm costs; the dynamically quantized nodes use it on the NumPy tier, as
their output is float and exactness buys nothing there, and the weight scales come for free. With the
[fast] tier they keep their weights as integers and run a compiled integer GEMV for few input rows
(qgemv.py): that reads 1/4 (int8) or 1/8 (4-bit) of the float32 bytes, which is what a decode step is
bound by. Static (int8 output)
nodes use the exact integer sgemm, then XNNPACK's fp32 requantization. Nothing here can be faster
than the float32 model's own sgemm of the same shape: a quantized node's gain is only in what
surrounds the GEMM, which is why float32 centred integers (not int8) pass between quantized nodes.
"""

from __future__ import annotations

from functools import partial

import numpy as np

EXACT = float(2**24)


def exact_splits(w: np.ndarray, x_bound: float) -> list[int]:
    """Chunk boundaries ``[0, k1, ..., K]`` along the rows of integer-valued ``w`` [K, N] such that,
    for inputs of magnitude at most ``x_bound``, every chunk's dot products stay exact in float32."""
    k = w.shape[0]
    if k == 0:
        return [0, 0]
    prefix = np.cumsum(np.abs(w.astype(np.float64)), axis=0) * x_bound  # [K, N]
    bounds, start, base = [0], 0, np.zeros(w.shape[1])
    while start < k:
        reach = (prefix[start:] - base).max(axis=1)  # bound of the chunk [start, start + i + 1)
        end = start + max(1, int(np.searchsorted(reach, EXACT, side="right")))
        bounds.append(end)
        base, start = prefix[end - 1], end
    return bounds


def matmul_steps(x: np.ndarray, w: np.ndarray, out: np.ndarray, splits: list[int]) -> list:
    """Steps for ``out = x @ w`` summed over the K-chunks ``splits`` (one sgemm when there is one chunk)."""
    if len(splits) <= 2:
        return [partial(np.matmul, x, w, out=out)]
    part = np.empty(out.shape, np.float32)
    total = np.empty(out.shape, np.float64)
    steps: list = [partial(total.fill, 0.0)]
    for a, b in zip(splits[:-1], splits[1:]):
        steps += [partial(np.matmul, x[:, a:b], w[a:b], out=part), partial(np.add, total, part, out=total)]
    return steps + [partial(np.copyto, out, total, casting="unsafe")]


def with_bias_row(w: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """``w`` [K, N] with the bias appended as row K (zeros without a bias), C-contiguous float32."""
    row = np.zeros((1, w.shape[1]), np.float32) if bias is None else np.asarray(bias, np.float32).reshape(1, -1)
    return np.ascontiguousarray(np.concatenate([w.astype(np.float32), row]))
