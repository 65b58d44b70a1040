"""Runs one .pte on the real ExecuTorch runtime, in a process of its own.

ExecuTorch's C++ runtime may abort or segfault on a program it dislikes; run here, that kills this process
only and the test that asked sees a failed call. Usage: ``python -m tests.executorch_worker DIR``, where DIR
holds ``model.pte`` and ``request.json`` (method name and the calls, each a list of inputs) plus
``inputs.npz`` with the array inputs. Outputs of call ``i`` go to ``outputs_i.npz`` and ``outputs.json``.
The method is loaded once, so state (mutable buffers) carries from one call to the next.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def _decode(spec: dict, arrays: dict):
    import torch

    if spec["kind"] == "array":
        return torch.from_numpy(np.array(arrays[spec["key"]]))
    return spec["value"]


def main(folder: str) -> None:
    import executorch.kernels.quantized  # noqa: F401  (the quantized_decomposed kernels, as a full build has)
    import torch
    from executorch.runtime import Runtime

    root = Path(folder)
    request = json.loads((root / "request.json").read_text())
    arrays = dict(np.load(root / "inputs.npz", allow_pickle=False))
    method = Runtime.get().load_program(root / "model.pte").load_method(request["method"])
    described = []
    for i, call in enumerate(request["calls"]):
        outs = method.execute([_decode(spec, arrays) for spec in call])
        kinds, tensors = [], {}
        for j, out in enumerate(outs):
            if isinstance(out, torch.Tensor):
                tensors[f"o{j}"] = out.detach().numpy()
                kinds.append({"kind": "array", "key": f"o{j}"})
            else:
                kinds.append({"kind": "scalar", "value": out})
        np.savez(root / f"outputs_{i}.npz", **tensors)
        described.append(kinds)
    (root / "outputs.json").write_text(json.dumps(described))


if __name__ == "__main__":
    main(sys.argv[1])
