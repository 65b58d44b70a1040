"""The random generator that random kernels draw from.

A ``Method`` owns a NumPy generator and makes it the active one before it runs. This state lives
outside the kernel package so that loading a program never imports a kernel family (the selective
runtime imports only the families its program needs).
"""

from __future__ import annotations

import numpy as np

_active = np.random.default_rng()


def generator() -> np.random.Generator:
    """The generator random kernels draw from: the running Method's."""
    return _active


def use_generator(rng: np.random.Generator) -> None:
    """Make ``rng`` the generator random kernels draw from (a Method does this before it runs)."""
    global _active
    _active = rng
