"""Samples of an evaluation dataset: finding them in a folder, reading one, shaping it for a method's inputs.

A sample is one item of the dataset: a ``.npy`` file (one input), a ``.npz`` file (its arrays are the inputs in
``np.savez`` order; an array named ``label`` is the label), an image (one input: RGB, resized (bilinear) to the
input's planned height and width or to a size given, its pixels scaled as :data:`IMAGE_SCALES` names, channels
first), or a row of a Parquet file. Files in class subfolders get the subfolder as their label: its number when every subfolder is
named by an integer, else its index among the sorted subfolder names (torchvision's ImageFolder order).

Torch-free and Ray-free: the workers import this module.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from edgetorch.errors import EdgetorchError, InvalidArgumentError

ARRAY_SUFFIXES = (".npy", ".npz")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")
# How an image's pixels become input values: ((pixel / 255) - mean) / std per channel, by the name a model's
# training used. "imagenet" is torchvision's normalization (the bench's vision models); "unit" is [0, 1];
# "symmetric" is [-1, 1], as EfficientNet-Lite (examples/vision) and TensorFlow's MobileNets expect.
IMAGE_SCALES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "unit": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),
    "symmetric": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}
# Columns with a meaning of their own; any other column of a Parquet file can be an input.
RESERVED_COLUMNS = ("sample", "name", "path", "label")


class SampleError(EdgetorchError, ValueError):
    """A sample could not be read or does not fit the method's inputs (a corrupt file, a wrong rank)."""


def list_samples(folder: str | pathlib.Path) -> list[dict[str, Any]]:
    """One row ``{"sample", "name", "path"[, "label"]}`` per array or image file under ``folder``, sorted by path.

    Files with other suffixes are skipped. Raises :class:`SampleError` when the folder holds no sample.
    """
    root = pathlib.Path(folder)
    if not root.is_dir():
        raise SampleError(f"expected a folder of .npy/.npz files or images, found no folder at {str(root)!r}")
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in ARRAY_SUFFIXES + IMAGE_SUFFIXES)
    if not files:
        raise SampleError(
            f"{str(root)!r} holds no sample: expected files ending in {', '.join(ARRAY_SUFFIXES + IMAGE_SUFFIXES)}"
        )
    classes = sorted({p.parent.relative_to(root).parts[0] for p in files if p.parent != root})
    numbered = bool(classes) and all(c.isdigit() for c in classes)
    rows = []
    for i, path in enumerate(files):
        row: dict[str, Any] = {"sample": i, "name": str(path.relative_to(root)), "path": str(path)}
        if classes:
            # a file at the top of a folder with class subfolders has no label
            top = path.relative_to(root).parts[0] if path.parent != root else None
            row["label"] = -1 if top is None else (int(top) if numbered else classes.index(top))
        rows.append(row)
    return rows


def image_normalization(
    scale: str | tuple[Sequence[float], Sequence[float]],
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The (mean, std) per channel of ``scale``: a name of :data:`IMAGE_SCALES` or a (mean, std) pair."""
    if isinstance(scale, str):
        if scale not in IMAGE_SCALES:
            raise InvalidArgumentError(f"unknown image scale {scale!r}; expected one of {', '.join(IMAGE_SCALES)}")
        return IMAGE_SCALES[scale]
    if len(scale) != 2:
        raise InvalidArgumentError(
            f"an image scale is one of {', '.join(IMAGE_SCALES)} or a (mean, std) pair, got {scale!r}"
        )
    mean, std = tuple(float(v) for v in scale[0]), tuple(float(v) for v in scale[1])
    if len(mean) not in (1, 3) or len(std) not in (1, 3) or min(std) <= 0:
        raise InvalidArgumentError(
            f"an image scale as (mean, std) needs 1 or 3 values each and std > 0, got {mean} and {std}"
        )
    return mean, std


def read_sample(
    path: str,
    sizes: Sequence[Sequence[int]],
    scale: str | tuple[Sequence[float], Sequence[float]] = "imagenet",
    image_size: tuple[int, int] | None = None,
) -> tuple[list[np.ndarray], int | None]:
    """The input arrays of the sample file at ``path`` and its label (None when the file has none).

    ``sizes`` are the method's planned input shapes: an image is resized to the last two of the first, or to
    ``image_size`` (height, width) when given, and its pixels scaled by ``scale`` (see
    :func:`image_normalization`). Any failure to read is a :class:`SampleError` naming the file.
    """
    suffix = pathlib.Path(path).suffix.lower()
    try:
        if suffix == ".npy":
            return [np.load(path, allow_pickle=False)], None
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as data:
                names = sorted((k for k in data.files if k != "label"), key=_savez_order)
                label = int(data["label"]) if "label" in data.files else None
                return [data[k] for k in names], label
        if suffix in IMAGE_SUFFIXES:
            return [read_image(path, sizes[0] if sizes else (), scale, image_size)], None
    except SampleError:
        raise
    except Exception as e:  # numpy and PIL raise ValueError, OSError, EOFError, zipfile errors...
        raise SampleError(f"cannot read sample {path!r}: {type(e).__name__}: {e}") from e
    raise SampleError(f"cannot read sample {path!r}: expected a suffix of {ARRAY_SUFFIXES + IMAGE_SUFFIXES}")


def _savez_order(name: str) -> tuple[int, str]:
    digits = name.rpartition("_")[2]
    return (int(digits), name) if digits.isdigit() else (1 << 62, name)


def read_image(
    path: str,
    sizes: Sequence[int],
    scale: str | tuple[Sequence[float], Sequence[float]] = "imagenet",
    image_size: tuple[int, int] | None = None,
) -> np.ndarray:
    """An image as a float32 ``[3, H, W]`` array for an input planned as ``[..., 3, H, W]`` (H, W: the plan's,
    or ``image_size``), its pixels scaled as ``scale`` says (see :func:`image_normalization`)."""
    mean, std = image_normalization(scale)
    try:
        from PIL import Image
    except ImportError:
        raise SampleError(f"reading the image {path!r} needs Pillow: pip install pillow") from None
    if len(sizes) < 3 or sizes[-3] != 3:
        raise SampleError(
            f"image {path!r}: the method's first input is planned as {list(sizes)}; an image needs [..., 3, H, W]"
        )
    height, width = image_size or (int(sizes[-2]), int(sizes[-1]))
    with Image.open(path) as image:
        rgb = image.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
    pixels = (np.asarray(rgb, dtype=np.float32) / np.float32(255) - np.asarray(mean, np.float32)) / np.asarray(
        std, np.float32
    )
    return np.ascontiguousarray(pixels.transpose(2, 0, 1))


def fit_to_input(x: Any, sizes: Sequence[int], dtype: np.dtype, dynamic: bool, index: int) -> tuple[np.ndarray, bool]:
    """``x`` shaped for input ``index``: with its batch dimension, and whether one was added (an item).

    An array one rank short of the planned shape is an item and gets a leading 1; a flat array (a Parquet list
    column) is reshaped to the planned item shape when its size fits. A float (int) array of another width is
    cast to the input's float (int) type; another dtype is left for the method to refuse. A shape that does
    not fit the plan (beyond its upper bounds when ``dynamic``) is a :class:`SampleError`.
    """
    x = np.asarray(x)
    item_shape = tuple(sizes[1:])
    if x.ndim == 1 and len(sizes) > 2 and x.size == int(np.prod(item_shape)):
        x = x.reshape(item_shape)
    if x.dtype != dtype and x.dtype.kind == dtype.kind and x.dtype.kind in "fiu":
        x = x.astype(dtype)
    item = len(sizes) >= 1 and x.ndim == len(sizes) - 1
    shape = (1, *x.shape) if item else x.shape
    fits = len(shape) == len(sizes) and all(
        n == s or (dynamic and n <= s) for i, (n, s) in enumerate(zip(shape, sizes)) if not (i == 0 and n == 1)
    )
    if not fits:
        bound = "at most " if dynamic else ""
        raise SampleError(
            f"input {index} has shape {list(x.shape)}; the method takes {bound}{list(sizes)} (or one item of it)"
        )
    return (x[None], True) if item else (x, False)
