"""Runs one .pte on the real ExecuTorch runtime, in a process of its own.

ExecuTorch's C++ runtime may abort or segfault on a program it dislikes; run here, that kills this process
only and the test that asked sees a failed call. Usage: ``python -m tests.executorch_worker DIR``, where DIR
holds ``model.pte`` and ``request.json`` (method name, the calls, each a list of inputs, and whether
``model.ptd`` holds data the program needs) plus ``inputs.npz`` with the array inputs. Outputs of call ``i`` go to ``outputs_i.npz`` and ``outputs.json``.
The method is loaded once, so state (mutable buffers) carries from one call to the next.

:func:`serve` is the long-lived form for sweeps over many small programs (bench/opinfo_compare.py): one
process answers load and run requests over a pipe until it dies, and its parent starts another.
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


def _import_runtime():
    """ExecuTorch's runtime and its quantized kernels, without running ``executorch.exir``'s package init.

    The runtime's Python modules import one small file of ``executorch.exir`` (its warning classes), which
    would pull in the whole compiler: 9 s instead of 3 s a process. A bare package object whose path is
    the real folder lets that file load on its own.
    """
    import importlib.util
    import types

    if "executorch.exir" not in sys.modules:
        root = importlib.util.find_spec("executorch").submodule_search_locations[0]
        compiler = types.ModuleType("executorch.exir")
        compiler.__path__ = [str(Path(root) / "exir")]
        sys.modules["executorch.exir"] = compiler
    import executorch.kernels.quantized  # noqa: F401  registers quantized_decomposed::* kernels
    from executorch.runtime import Runtime

    return Runtime


def main(folder: str) -> None:
    import executorch.kernels.quantized  # noqa: F401  (the quantized_decomposed kernels, as a full build has)
    import torch

    Runtime = _import_runtime()

    root = Path(folder)
    request = json.loads((root / "request.json").read_text())
    if request.get("llama_ops"):
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  registers the llama::* kernels
    arrays = dict(np.load(root / "inputs.npz", allow_pickle=False))
    data_path = root / "model.ptd" if request.get("data") else None
    method = Runtime.get().load_program(root / "model.pte", data_path=data_path).load_method(request["method"])
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


def serve(conn) -> None:
    """Answer requests on the pipe ``conn`` until it closes.

    ``("load", pte_bytes)`` loads the program's ``forward`` (replacing the last one); ``("run", tensors)``
    executes it. Each reply is ``("ok", value)`` (None, or the outputs with tensors cloned) or
    ``("error", text)`` when ExecuTorch raised instead of crashing.
    """
    import torch

    Runtime = _import_runtime()
    program = method = None
    while True:
        try:
            kind, payload = conn.recv()
        except EOFError:
            return
        try:
            if kind == "load":
                program = method = None
                # Kept while the method runs: ExecuTorch's Method does not hold its Program, and a program loaded
                # from bytes reads its constants from the bytes that Program holds (dropped, they are freed
                # memory and the next run may segfault).
                program = Runtime.get().load_program(bytes(payload))
                method = program.load_method("forward")
                conn.send(("ok", None))
            else:
                outs = method.execute(list(payload))
                conn.send(("ok", [o.clone() if isinstance(o, torch.Tensor) else o for o in outs]))
        except Exception as e:
            conn.send(("error", f"{type(e).__name__}: {e}"))


if __name__ == "__main__":
    main(sys.argv[1])
