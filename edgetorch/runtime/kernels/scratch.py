"""Scratch arrays that kernels reuse from call to call instead of allocating temporaries.

A fresh NumPy temporary of a few hundred kilobytes or more costs an allocation and a page fault per 4 KiB page on
first touch; for the convolutions of a MobileNetV2 that was more time than the arithmetic. Kernels therefore take
their padded copies, column matrices and partial results from here: one array per (purpose, shape, dtype), kept
per thread so that methods running in different threads never share one. Imports only the standard library and
NumPy.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

import numpy as np

# Dynamic shapes make a new entry per shape; past this many the cache starts over rather than grow without bound.
MAX_ENTRIES = 256

_local = threading.local()


def scratch(purpose: Hashable, shape: tuple[int, ...], dtype: np.dtype, fill: float | None = None) -> np.ndarray:
    """A C-contiguous array of ``shape`` and ``dtype`` that every call with the same arguments gets back.

    Its contents are what the previous user left there. With ``fill`` the array is filled once, when it is made:
    a caller that only ever rewrites the same region (the inside of a padded copy) finds the rest still at
    ``fill``. The array is valid until the next request with the same arguments on this thread, so a kernel may
    use it for temporaries but never return it.
    """
    arrays = getattr(_local, "arrays", None)
    if arrays is None:
        arrays = _local.arrays = {}
    key = (purpose, shape, np.dtype(dtype), fill)
    found = arrays.get(key)
    if found is None:
        if len(arrays) >= MAX_ENTRIES:
            arrays.clear()
        found = arrays[key] = np.empty(shape, dtype) if fill is None else np.full(shape, fill, dtype)
    return found
