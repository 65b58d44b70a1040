"""Sample transforms the Ray tests hand to their workers (torch-free: the workers must not import torch).

The test module registers this module with cloudpickle by value, so the workers get these classes without
importing the tests package (which would import torch).
"""

from __future__ import annotations

import os
import sys

import numpy as np


class NoTorch:
    """Passes samples through; fails a sample (an error row) if its worker has imported torch."""

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        if "torch" in sys.modules:
            raise RuntimeError("torch was imported in a program worker")
        return arrays


class CrashOnce:
    """Kills its worker process mid-batch (``os._exit``) at the first sample whose first value is ``trigger``;
    the file ``marker`` it leaves lets the retried batch pass."""

    def __init__(self, marker: str, trigger: float):
        self.marker = marker
        self.trigger = trigger

    def __call__(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        first = np.asarray(arrays[0]).ravel()
        if first.size and float(first[0]) == self.trigger and not os.path.exists(self.marker):
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            os._exit(1)
        return arrays
