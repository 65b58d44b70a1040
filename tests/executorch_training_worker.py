"""Trains one joint-graph .pte with ExecuTorch's own TrainingModule and SGD, in a process of its own.

Usage: ``python -m tests.executorch_training_worker DIR``, where DIR holds ``model.pte``, ``request.json``
(the method, the SGD options, and per step the keys of its inputs) and ``inputs.npz``. Each step runs
``forward_backward`` and then ``SGD.step`` (the optimizer is made after the first ``forward_backward``, as
ExecuTorch's python TrainingModule has no parameters before it). Writes ``losses.npz`` (each step's user
outputs before its update), ``parameters.npz`` (after the last step) and ``gradients.npz`` (of the last step).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(folder: str) -> None:
    import torch
    from executorch.extension.training import _load_for_executorch_for_training, get_sgd_optimizer

    root = Path(folder)
    request = json.loads((root / "request.json").read_text())
    arrays = dict(np.load(root / "inputs.npz", allow_pickle=False))
    module = _load_for_executorch_for_training(str(root / "model.pte"))
    method, sgd, losses = request["method"], None, []
    for keys in request["steps"]:
        outputs = module.forward_backward(method, [torch.from_numpy(arrays[k]) for k in keys])
        losses.append(outputs[0].detach().numpy())
        if sgd is None:
            options = request["sgd"]
            sgd = get_sgd_optimizer(
                module.named_parameters(),
                options["lr"],
                options["momentum"],
                options["dampening"],
                options["weight_decay"],
                options["nesterov"],
            )
        sgd.step(module.named_gradients())
    np.savez(root / "losses.npz", losses=np.stack(losses))
    np.savez(root / "parameters.npz", **{k: v.detach().numpy() for k, v in module.named_parameters().items()})
    np.savez(root / "gradients.npz", **{k: v.detach().numpy() for k, v in module.named_gradients().items()})


if __name__ == "__main__":
    main(sys.argv[1])
