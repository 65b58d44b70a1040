"""Runs one .pte on ExecuTorch's runtime with its ETDump tracer, in a process of its own (a worker for
``tests.oracle.run_worker``, forked from the server that has ExecuTorch's runtime imported).

FOLDER holds ``model.pte``, ``inputs.npz`` (the inputs, in order) and ``request.json`` (``runs``, and
``debug``: whether to keep values in a debug buffer); the worker writes ``executorch.etdp`` (and
``executorch.bin``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(folder: str) -> None:
    import torch
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    root = Path(folder)
    request = json.loads((root / "request.json").read_text())
    debug_size = (1 << 22) if request["debug"] else 0
    module = _load_for_executorch(str(root / "model.pte"), enable_etdump=True, debug_buffer_size=debug_size)
    with np.load(root / "inputs.npz") as saved:
        args = [torch.from_numpy(saved[k]) for k in saved.files]
    for _ in range(request["runs"]):
        module.forward(args)
    buffer = str(root / "executorch.bin") if request["debug"] else None
    module.write_etdump_result_to_file(str(root / "executorch.etdp"), buffer)


if __name__ == "__main__":
    main(sys.argv[1])
