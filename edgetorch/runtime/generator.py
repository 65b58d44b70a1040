"""The random generator that random kernels draw from.

A ``Method`` owns a NumPy generator and makes it the active one before it runs. This state lives
outside the kernel package so that loading a program never imports a kernel family (the selective
runtime imports only the families its program needs).
"""

from __future__ import annotations

import threading

import numpy as np

_local = threading.local()  # methods running in different threads each draw from their own generator


def generator() -> np.random.Generator:
    """The generator random kernels draw from: the one the method running in this thread set."""
    rng = getattr(_local, "rng", None)
    if rng is None:
        rng = _local.rng = np.random.default_rng()
    return rng


def use_generator(rng: np.random.Generator) -> None:
    """Make ``rng`` the generator random kernels in this thread draw from (a Method does this before it runs)."""
    _local.rng = rng
