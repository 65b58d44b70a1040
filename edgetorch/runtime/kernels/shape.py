"""Shape kernels: the ``*_copy`` view ops, concatenation, splitting, repetition, flips and triangles.

Torch-free (NumPy only). A copy op is one ``np.copyto`` from a NumPy view of the input into the
planned ``out`` (resized to the result shape first); ops with a list of outs fill and return the list.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view

from edgetorch.errors import InvalidArgumentError, OutOfRangeError
from edgetorch.runtime.kernels.registry import kernel, wrap_dim
from edgetorch.runtime.memory import resize


def along(dim: int, index: object) -> tuple:
    """An indexing tuple applying ``index`` on axis ``dim`` and taking everything on the axes before it."""
    return (slice(None),) * dim + (index,)


def copy_into(out: np.ndarray, value: np.ndarray) -> np.ndarray:
    """``out`` resized to ``value``'s shape and filled with it (cast to ``out``'s dtype); returns the resized out."""
    out = resize(out, value.shape)
    np.copyto(out, value, casting="unsafe")
    return out


def shaped_view(out: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A view of contiguous ``out`` with another shape of the same size (raises rather than copying)."""
    view = out.view()
    view.shape = shape
    return view


@kernel("aten::view_copy.out", "aten::_unsafe_view.out")
def view_copy(self: np.ndarray, size: list[int], out: np.ndarray) -> np.ndarray:
    """``self`` reshaped to ``size`` (one entry may be -1)."""
    return copy_into(out, self.reshape(size))


@kernel("aten::alias_copy.out", "aten::detach_copy.out", "aten::lift_fresh_copy.out")
def alias_copy(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A plain copy of ``self``."""
    return copy_into(out, self)


@kernel("aten::permute_copy.out")
def permute_copy(self: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    """``self`` with its axes reordered by ``dims``."""
    axes = [wrap_dim(d, self.ndim) for d in dims]
    if axes == [1, 0] and self.size >= _TILED_TRANSPOSE and self.strides[0] % 1024 == 0:
        return _transpose_2d(self, out)
    return copy_into(out, self.transpose(axes))


# A large matrix transposed in one copy reads a new cache line per element, and a row stride that is a
# multiple of 1 KB maps those lines onto a few cache sets, which thrash: a [1024, 1024] float32 weight
# (the transpose in front of the addmm of every dequantized linear of a non-delegated 8da4w model) is
# several times slower than it needs to be. Copying 16 source rows at a time keeps the lines in use few
# enough to stay cached. Other strides (e.g. 784 floats) do not thrash and copy faster whole.
_TILED_TRANSPOSE = 1 << 16
_TILE_ROWS = 16


def _transpose_2d(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    rows = x.shape[0]
    out = resize(out, (x.shape[1], rows))
    for i in range(0, rows, _TILE_ROWS):
        np.copyto(out[:, i : i + _TILE_ROWS], x[i : i + _TILE_ROWS].T, casting="unsafe")
    return out


@kernel("aten::expand_copy.out")
def expand_copy(self: np.ndarray, size: list[int], implicit: bool, out: np.ndarray) -> np.ndarray:
    """``self`` broadcast to ``size``; -1 keeps the existing size of that (trailing-aligned) axis."""
    lead = len(size) - self.ndim
    shape = tuple(self.shape[i - lead] if s == -1 else s for i, s in enumerate(size))
    return copy_into(out, np.broadcast_to(self, shape))


@kernel("aten::slice_copy.Tensor_out")
def slice_copy(
    self: np.ndarray, dim: int, start: int | None, end: int | None, step: int, out: np.ndarray
) -> np.ndarray:
    """``self[start:end:step]`` along ``dim`` (Python slice clamping; step must be positive)."""
    if step <= 0:
        raise InvalidArgumentError(f"slice_copy expects a positive step, got {step}")
    return copy_into(out, self[along(wrap_dim(dim, self.ndim), slice(start, end, step))])


@kernel("aten::select_copy.int_out")
def select_copy(self: np.ndarray, dim: int, index: int, out: np.ndarray) -> np.ndarray:
    """``self[index]`` along ``dim``, which drops that axis."""
    return copy_into(out, self[along(wrap_dim(dim, self.ndim), index)])


@kernel("aten::narrow_copy.out")
def narrow_copy(self: np.ndarray, dim: int, start: int, length: int, out: np.ndarray) -> np.ndarray:
    """``length`` entries of ``self`` along ``dim`` from ``start`` (negative start counts from the end)."""
    dim = wrap_dim(dim, self.ndim)
    start = start + self.shape[dim] if start < 0 else start
    if start + length > self.shape[dim]:
        raise OutOfRangeError(
            f"narrow_copy: start {start} + length {length} exceeds size {self.shape[dim]} of dim {dim}"
        )
    return copy_into(out, self[along(dim, slice(start, start + length))])


def squeezed(self: np.ndarray, dims: list[int]) -> np.ndarray:
    """``self`` without those of ``dims`` whose size is 1 (other listed dims are kept, like torch)."""
    axes = {wrap_dim(d, self.ndim) for d in dims}
    return self.squeeze(tuple(a for a in axes if a < self.ndim and self.shape[a] == 1))


@kernel("aten::squeeze_copy.out")
def squeeze_copy(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``self`` without any size-1 axis."""
    return copy_into(out, self.squeeze())


@kernel("aten::squeeze_copy.dim_out")
def squeeze_copy_dim(self: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """``self`` without axis ``dim`` if its size is 1."""
    return copy_into(out, squeezed(self, [dim]))


@kernel("aten::squeeze_copy.dims_out")
def squeeze_copy_dims(self: np.ndarray, dim: list[int], out: np.ndarray) -> np.ndarray:
    """``self`` without those of the axes ``dim`` whose size is 1."""
    return copy_into(out, squeezed(self, dim))


@kernel("aten::unsqueeze_copy.out")
def unsqueeze_copy(self: np.ndarray, dim: int, out: np.ndarray) -> np.ndarray:
    """``self`` with a new size-1 axis at ``dim`` (in [-ndim-1, ndim])."""
    return copy_into(out, np.expand_dims(self, wrap_dim(dim, self.ndim + 1)))


@kernel("aten::t_copy.out")
def t_copy(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The transpose of a matrix (a 0-D or 1-D tensor is copied unchanged)."""
    if self.ndim > 2:
        raise InvalidArgumentError(
            f"t_copy expects a tensor of at most 2 dims, got shape {self.shape}; use transpose_copy"
        )
    return copy_into(out, self.T)


@kernel("aten::transpose_copy.int_out")
def transpose_copy(self: np.ndarray, dim0: int, dim1: int, out: np.ndarray) -> np.ndarray:
    """``self`` with axes ``dim0`` and ``dim1`` swapped."""
    return copy_into(out, np.swapaxes(self, wrap_dim(dim0, self.ndim), wrap_dim(dim1, self.ndim)))


@kernel("aten::flip.out")
def flip(self: np.ndarray, dims: list[int], out: np.ndarray) -> np.ndarray:
    """``self`` reversed along each of ``dims``."""
    return copy_into(out, np.flip(self, tuple(wrap_dim(d, self.ndim) for d in dims)))


@kernel("aten::roll.out")
def roll(self: np.ndarray, shifts: list[int], dims: list[int], out: np.ndarray) -> np.ndarray:
    """``self`` rolled by ``shifts`` along ``dims`` (no dims: rolled as a flat tensor)."""
    if not dims:
        return copy_into(out, np.roll(self.reshape(-1), shifts).reshape(self.shape))
    return copy_into(out, np.roll(self, shifts, tuple(wrap_dim(d, self.ndim) for d in dims)))


@kernel("aten::as_strided_copy.out")
def as_strided_copy(
    self: np.ndarray, size: list[int], stride: list[int], storage_offset: int | None, out: np.ndarray
) -> np.ndarray:
    """The elements of contiguous ``self`` at ``offset + sum(i_k * stride_k)`` laid out with shape ``size``."""
    flat = np.ascontiguousarray(self).reshape(-1)
    offset = storage_offset or 0
    if math.prod(size) > 0:
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if offset < 0 or min(stride, default=0) < 0 or last >= flat.size:
            raise OutOfRangeError(
                f"as_strided_copy: size {size}, stride {stride}, offset {offset} reach element {last}, "
                f"outside the input's {flat.size} elements"
            )
    view = as_strided(flat[offset:], shape=size, strides=[s * flat.itemsize for s in stride], writeable=False)
    return copy_into(out, view)


@kernel("aten::diagonal_copy.out")
def diagonal_copy(self: np.ndarray, offset: int, dim1: int, dim2: int, out: np.ndarray) -> np.ndarray:
    """The ``offset`` diagonal of the ``dim1``/``dim2`` planes of ``self``, as a new last axis."""
    return copy_into(out, np.diagonal(self, offset, wrap_dim(dim1, self.ndim), wrap_dim(dim2, self.ndim)))


def triangle(self: np.ndarray, diagonal: int, out: np.ndarray, lower: bool) -> np.ndarray:
    """``self`` with the entries above (lower) or below (upper) the ``diagonal`` of its last two axes zeroed."""
    rows, cols = self.shape[-2:]
    keep = np.tri(rows, cols, diagonal, dtype=bool) if lower else ~np.tri(rows, cols, diagonal - 1, dtype=bool)
    out = resize(out, self.shape)
    np.copyto(out, self, casting="unsafe", where=keep)
    np.copyto(out, 0, casting="unsafe", where=~keep)
    return out


@kernel("aten::tril.out")
def tril(self: np.ndarray, diagonal: int, out: np.ndarray) -> np.ndarray:
    """The lower triangle of the last two axes of ``self``."""
    return triangle(self, diagonal, out, lower=True)


@kernel("aten::triu.out")
def triu(self: np.ndarray, diagonal: int, out: np.ndarray) -> np.ndarray:
    """The upper triangle of the last two axes of ``self``."""
    return triangle(self, diagonal, out, lower=False)


@kernel("aten::unfold_copy.out")
def unfold_copy(self: np.ndarray, dimension: int, size: int, step: int, out: np.ndarray) -> np.ndarray:
    """Windows of ``size`` entries every ``step`` along ``dimension``, as a new last axis."""
    dim = wrap_dim(dimension, self.ndim)
    windows = sliding_window_view(self.reshape(self.shape or (1,)), size, axis=dim)[along(dim, slice(None, None, step))]
    return copy_into(out, windows.reshape(windows.shape[1:]) if self.ndim == 0 else windows)


@kernel("aten::view_as_real_copy.out")
def view_as_real_copy(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A complex tensor as real and imaginary parts in a new last axis of size 2."""
    out = resize(out, (*self.shape, 2))
    return np.stack((self.real, self.imag), axis=-1, out=out, casting="unsafe")


@kernel("aten::view_as_complex_copy.out")
def view_as_complex_copy(self: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A real tensor whose last axis (size 2) holds real and imaginary parts, as a complex tensor."""
    out = resize(out, self.shape[:-1])
    out.real = self[..., 0]
    out.imag = self[..., 1]
    return out


@kernel("aten::cat.out", "aten::concat.out", "aten::concatenate.out")
def cat(tensors: list[np.ndarray], dim: int, out: np.ndarray) -> np.ndarray:
    """``tensors`` joined along ``dim``, cast to ``out``'s (promoted) dtype; 1-D empty tensors are skipped."""
    kept = [t for t in tensors if t.shape != (0,)]
    if not kept:
        return resize(out, (0,))
    dim = wrap_dim(dim, kept[0].ndim)
    shape = list(kept[0].shape)
    shape[dim] = sum(t.shape[dim] for t in kept)
    return np.concatenate(kept, axis=dim, out=resize(out, shape), casting="unsafe")


@kernel("aten::stack.out")
def stack(tensors: list[np.ndarray], dim: int, out: np.ndarray) -> np.ndarray:
    """``tensors`` (all of one shape) stacked along a new axis ``dim``."""
    dim = wrap_dim(dim, tensors[0].ndim + 1)
    shape = list(tensors[0].shape)
    shape.insert(dim, len(tensors))
    return np.stack(tensors, axis=dim, out=resize(out, shape), casting="unsafe")


def fill_list(outs: list[np.ndarray], parts: list[np.ndarray], op: str) -> list[np.ndarray]:
    """Each out resized and filled with its part; the list of resized outs (in place in ``outs``)."""
    if len(outs) != len(parts):
        raise InvalidArgumentError(f"{op} produces {len(parts)} tensors but the program provides {len(outs)} outputs")
    outs[:] = [copy_into(o, p) for o, p in zip(outs, parts)]
    return outs


def split_parts(self: np.ndarray, sizes: list[int], dim: int) -> list[np.ndarray]:
    """Views of consecutive pieces of ``self`` along ``dim`` with the given sizes."""
    if sum(sizes) != self.shape[dim]:
        raise InvalidArgumentError(f"split sizes {sizes} do not add up to size {self.shape[dim]} of dim {dim}")
    bounds = np.cumsum([0, *sizes]).tolist()
    return [self[along(dim, slice(a, b))] for a, b in zip(bounds, bounds[1:])]


@kernel("aten::split_copy.Tensor_out")
def split_copy(self: np.ndarray, split_size: int, dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    """``self`` cut into pieces of ``split_size`` along ``dim`` (the last may be shorter)."""
    dim = wrap_dim(dim, self.ndim)
    n = self.shape[dim]
    count = max(1, -(-n // split_size)) if split_size > 0 else 1
    sizes = [min(split_size, n - i * split_size) for i in range(count)]
    return fill_list(out, split_parts(self, sizes, dim), "split_copy")


@kernel("aten::split_with_sizes_copy.out")
def split_with_sizes_copy(
    self: np.ndarray, split_sizes: list[int], dim: int, out: list[np.ndarray]
) -> list[np.ndarray]:
    """``self`` cut into pieces of ``split_sizes`` along ``dim``."""
    dim = wrap_dim(dim, self.ndim)
    return fill_list(out, split_parts(self, split_sizes, dim), "split_with_sizes_copy")


@kernel("aten::unbind_copy.int_out")
def unbind_copy(self: np.ndarray, dim: int, out: list[np.ndarray]) -> list[np.ndarray]:
    """Every slice of ``self`` along ``dim``."""
    dim = wrap_dim(dim, self.ndim)
    return fill_list(out, [self[along(dim, i)] for i in range(self.shape[dim])], "unbind_copy")


@kernel("aten::repeat.out")
def repeat(self: np.ndarray, repeats: list[int], out: np.ndarray) -> np.ndarray:
    """``self`` tiled ``repeats`` times per axis (``repeats`` may add leading axes)."""
    if len(repeats) < self.ndim:
        raise InvalidArgumentError(f"repeat needs at least {self.ndim} repeats for shape {self.shape}, got {repeats}")
    sizes = (1,) * (len(repeats) - self.ndim) + self.shape
    out = resize(out, [r * s for r, s in zip(repeats, sizes)])
    # View out as (r0, s0, r1, s1, ...) and broadcast the input over the r axes: one copy.
    tiled = shaped_view(out, tuple(v for pair in zip(repeats, sizes) for v in pair))
    np.copyto(tiled, self.reshape(tuple(v for s in sizes for v in (1, s))), casting="unsafe")
    return out


@kernel("aten::repeat_interleave.Tensor_out")
def repeat_interleave(repeats: np.ndarray, output_size: int | None, out: np.ndarray) -> np.ndarray:
    """Each position ``i`` repeated ``repeats[i]`` times: ``[0]*r0 + [1]*r1 + ...``."""
    counts = repeats.reshape(-1)
    return copy_into(out, np.repeat(np.arange(counts.size, dtype=out.dtype), counts))


def _diagonal_coordinates(shape: tuple[int, ...], offset: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the ``offset`` diagonal of a (rows, cols) plane."""
    rows, cols = shape
    n = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    steps = np.arange(n)
    return steps - min(offset, 0), steps + max(offset, 0)


@kernel("aten::diagonal_scatter.out")
def diagonal_scatter(
    self: np.ndarray, src: np.ndarray, offset: int, dim1: int, dim2: int, out: np.ndarray
) -> np.ndarray:
    """A copy of ``self`` with the ``offset`` diagonal of its ``dim1``/``dim2`` planes replaced by ``src``."""
    out = copy_into(out, self)
    planes = np.moveaxis(out, (wrap_dim(dim1, self.ndim), wrap_dim(dim2, self.ndim)), (-2, -1))
    rows, cols = _diagonal_coordinates(planes.shape[-2:], offset)
    planes[..., rows, cols] = src
    return out


@kernel("aten::as_strided_scatter.out")
def as_strided_scatter(
    self: np.ndarray,
    src: np.ndarray,
    size: list[int],
    stride: list[int],
    storage_offset: int | None,
    out: np.ndarray,
) -> np.ndarray:
    """A copy of contiguous ``self`` with the elements :func:`as_strided_copy` would read replaced by ``src``."""
    out = copy_into(out, self)
    flat = out.reshape(-1)
    positions = np.asarray(
        as_strided_copy(np.arange(flat.size), size, stride, storage_offset, np.empty(size, np.int64))
    )
    flat[positions.reshape(-1)] = np.broadcast_to(src, positions.shape).reshape(-1)
    return out


@kernel("aten::sym_storage_offset")
def sym_storage_offset(self: np.ndarray) -> int:
    """Always 0: every tensor of a program starts at its own data pointer (there are no storage offsets)."""
    return 0


@kernel("aten::resize.out")
def resize_kernel(self: np.ndarray, size: list[int], memory_format: int | None, out: np.ndarray) -> np.ndarray:
    """``self``'s elements (in order) laid out in shape ``size``; elements past ``self``'s are left uninitialised,
    as torch leaves the memory a resize grows into."""
    out = resize(out, tuple(size))
    n = min(out.size, self.size)
    out.reshape(-1)[:n] = self.reshape(-1)[:n]
    return out
