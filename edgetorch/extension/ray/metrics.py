"""Per-sample metrics of a program's outputs against a reference (another program, eager PyTorch) or a label.

``top1`` is 1.0 when the first output's arg-max is the label (or, without a label, the reference's arg-max);
``sqnr`` (dB, higher is better; inf when equal), ``mse`` and ``max_abs`` compare all outputs, flattened and
joined, with the reference's. Torch-free: the workers import this module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from edgetorch.errors import InvalidArgumentError


def _joined(values: Sequence[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(v, np.float64).ravel() for v in values])


def _pair(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    if len(outputs) != len(reference):
        raise InvalidArgumentError(
            f"the program has {len(outputs)} outputs, the reference {len(reference)}; they must match one to one"
        )
    for i, (a, b) in enumerate(zip(outputs, reference)):
        if np.shape(a) != np.shape(b):
            raise InvalidArgumentError(
                f"output {i} has shape {list(np.shape(a))}, the reference's {list(np.shape(b))}; they must match"
            )
    return _joined(outputs), _joined(reference)


def sqnr(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    out, ref = _pair(outputs, reference)
    noise = float(np.sum((out - ref) ** 2))
    return float("inf") if noise == 0 else float(10 * np.log10(float(np.sum(ref**2)) / noise))


def mse(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    out, ref = _pair(outputs, reference)
    return float(np.mean((out - ref) ** 2))


def max_abs(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    out, ref = _pair(outputs, reference)
    return float(np.max(np.abs(out - ref))) if out.size else 0.0


def prediction(outputs: Sequence[np.ndarray]) -> int:
    """The class a classifier's first output picks (its arg-max over all elements)."""
    return int(np.argmax(np.asarray(outputs[0]).ravel()))


# name -> function of (outputs, reference outputs); top1 is measured apart since it may use a label instead
COMPARISONS: dict[str, Callable[[Sequence[np.ndarray], Sequence[np.ndarray]], float]] = {
    "sqnr": sqnr,
    "mse": mse,
    "max_abs": max_abs,
}
METRICS = ("top1", *COMPARISONS)


def measure(
    metric: str, outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray] | None, label: int | None
) -> float:
    """The value of ``metric`` for one sample; raises :class:`InvalidArgumentError` when it lacks what it needs."""
    if metric == "top1":
        if label is not None and label >= 0:
            return float(prediction(outputs) == label)
        if reference is None:
            raise InvalidArgumentError(
                "top1 needs a label (class subfolders, a 'label' array or column) or a reference"
            )
        return float(prediction(outputs) == prediction(reference))
    if metric not in COMPARISONS:
        raise InvalidArgumentError(f"unknown metric {metric!r}; expected one of {', '.join(METRICS)}")
    if reference is None:
        raise InvalidArgumentError(f"{metric} compares against a reference: pass a reference program or eager model")
    return COMPARISONS[metric](outputs, reference)
