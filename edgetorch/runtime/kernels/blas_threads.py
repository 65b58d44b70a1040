"""NumPy's BLAS thread count, lowered to one while kernels that run their own threads (gemm.py's split GEMM,
on numba's OpenMP threads) take the cores.

Both pools keep their idle threads spinning for a while after each call, so that the next call starts at
once. When a program alternates between them (ViT-tiny's delegate: packed GEMMs for the linear layers, BLAS
for the attention's batch matmuls), each pool's spinning thread takes the core the other pool's thread
needs, and every call waits for a thread the OS has descheduled (ViT-tiny's delegate ran several times
slower: docs/benchmarks.md, "Figures behind the code"). With BLAS on one thread for the run, only numba's pool
spins. The count is set through OpenBLAS's C API (``openblas_set_num_threads``, found in the library NumPy
loaded, under the names its builds export), about a microsecond a call; with another BLAS (MKL, Accelerate)
nothing is found and nothing changes.

Imports only the standard library, NumPy and compiled.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import threading
from typing import Any

import numpy as np

from edgetorch.runtime.kernels import compiled

_api: Any = None  # (get, set) once looked up; False when NumPy's BLAS is not an OpenBLAS found here


def _lookup() -> Any:
    """NumPy's OpenBLAS ``(get_num_threads, set_num_threads)``, or False."""
    root = os.path.dirname(os.path.dirname(np.__file__))
    candidates = []
    for folder in ("numpy.libs", os.path.join("numpy", ".dylibs")):
        candidates += sorted(glob.glob(os.path.join(root, folder, "*openblas*")))
    for path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in ("scipy_", ""):
            for suffix in ("64_", "_64", ""):
                get = getattr(lib, f"{prefix}openblas_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}openblas_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype, get.argtypes = ctypes.c_int, []
                    put.restype, put.argtypes = None, [ctypes.c_int]
                    return get, put
    return False


class OneThread:
    """``with ONE_THREAD:`` runs its body with NumPy's OpenBLAS on one thread and restores the count it found
    when the outermost such body ends. Nests (a fused method that calls an XNNPACK delegate enters it twice)
    and counts its entries under a lock; the count itself is process-wide, so a thread that calls BLAS while
    another runs such a body gets one thread too."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.before = 0  # the count found at the outermost entry; 0 when NumPy's BLAS is not OpenBLAS

    def __enter__(self) -> None:
        global _api
        with self.lock:
            if self.depth == 0:
                if _api is None:
                    _api = _lookup()
                self.before = _api[0]() if _api else 0
                if self.before > 1:
                    _api[1](1)
            self.depth += 1

    def __exit__(self, *exc: object) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.before > 1:
                _api[1](self.before)


ONE_THREAD = OneThread()
_FREE = contextlib.nullcontext()


def held(active: bool) -> Any:
    """``ONE_THREAD`` when ``active`` (the code about to run splits kernels over numba's threads) and the runtime
    may use more than one thread (``compiled.get_num_threads``), else a context that changes nothing."""
    return ONE_THREAD if active and compiled.get_num_threads() > 1 else _FREE
