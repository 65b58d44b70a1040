"""SGD for on-device training, as ExecuTorch's ``get_sgd_optimizer``: updates parameter arrays in place.

The update is PyTorch's ``torch.optim.SGD`` (and ExecuTorch's C++ SGD): weight decay added to the
gradient, a momentum buffer started from the first gradient, optional dampening and Nesterov momentum.
Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from edgetorch.errors import InvalidInputError


class SGD:
    """Stochastic gradient descent over named parameter arrays (updated in place by :meth:`step`)."""

    def __init__(
        self,
        named_parameters: Mapping[str, np.ndarray],
        lr: float,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        for what, value in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if value < 0:
                raise InvalidInputError(f"SGD {what} must be >= 0, found {value}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise InvalidInputError(
                f"Nesterov momentum needs momentum > 0 and dampening 0, found momentum {momentum}, "
                f"dampening {dampening}"
            )
        params: dict[str, np.ndarray] = {}
        for name, p in named_parameters.items():
            if not isinstance(p, np.ndarray) and callable(getattr(p, "numpy", None)):
                p = p.detach().numpy()  # a torch tensor: its memory, as an array
            if not isinstance(p, np.ndarray) or not p.flags.writeable:
                raise InvalidInputError(
                    f"parameter {name!r} must be a writable NumPy array, found "
                    f"{'a read-only array' if isinstance(p, np.ndarray) else type(p).__name__}; "
                    "pass TrainingModule.named_parameters(), whose arrays are the program's parameters"
                )
            params[name] = p
        self.params = params
        self.lr, self.momentum, self.dampening = lr, momentum, dampening
        self.weight_decay, self.nesterov = weight_decay, nesterov
        self.momentum_buffers: dict[str, np.ndarray] = {}

    def step(self, named_gradients: Mapping[str, Any]) -> None:
        """Move each parameter against its gradient; gradients are matched by name, others are ignored."""
        for name, grad in named_gradients.items():
            p = self.params.get(name)
            if p is None:
                continue
            d = np.asarray(grad)
            if d.shape != p.shape:
                raise InvalidInputError(f"gradient {name!r} has shape {list(d.shape)}, its parameter {list(p.shape)}")
            d = d.astype(p.dtype, copy=False)
            if self.weight_decay:
                d = d + self.weight_decay * p
            if self.momentum:
                buf = self.momentum_buffers.get(name)
                if buf is None:
                    buf = self.momentum_buffers[name] = d.copy()
                else:
                    buf *= self.momentum
                    buf += (1 - self.dampening) * d
                d = d + self.momentum * buf if self.nesterov else buf
            p -= self.lr * d


def get_sgd_optimizer(
    named_parameters: Mapping[str, np.ndarray],
    lr: float,
    momentum: float = 0.0,
    dampening: float = 0.0,
    weight_decay: float = 0.0,
    nesterov: bool = False,
) -> SGD:
    """An SGD optimizer over ``named_parameters`` (for example ``TrainingModule.named_parameters()``)."""
    return SGD(named_parameters, lr, momentum, dampening, weight_decay, nesterov)
