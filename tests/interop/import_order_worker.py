"""Lowers one model with edgetorch and with the real ExecuTorch in one fresh process, in a chosen import order.

``python -m tests.interop.import_order_worker ORDER DIR`` with ORDER ``edgetorch-first`` or
``executorch-first``. Nothing from edgetorch or executorch is imported before ORDER says so. Writes
``<label>.pte`` for each program, ``inputs.npz`` and ``eager.npz`` (the model's input and eager outputs),
and ``report.json``: the labels, and for every operator namespace edgetorch shares with ExecuTorch
whether edgetorch's definitions were the live ones after each step.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch


class Model(torch.nn.Module):
    """A conv whose result is cloned and cast: ``_clone_dim_order`` and ``_to_dim_order_copy`` in the program."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.conv(x)).clone()
        return y, y.to(torch.float64)


def _edgetorch(ep, xnnpack: bool) -> bytes:
    import edgetorch.exir
    from edgetorch.backends.xnnpack import XnnpackPartitioner

    if xnnpack:
        return edgetorch.exir.to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return edgetorch.exir.to_edge(ep).to_executorch().buffer


def _executorch(ep, xnnpack: bool) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge, to_edge_transform_and_lower

    if xnnpack:
        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return to_edge(ep).to_executorch().buffer


def _owners() -> dict[str, bool]:
    from edgetorch.exir.dialects.shared_library import SHARED_LIBRARIES

    return {ns: lib.defined_by_edgetorch for ns, lib in SHARED_LIBRARIES.items()}


def main(order: str, folder: str) -> None:
    root = Path(folder)
    torch.manual_seed(0)
    model = Model().eval()
    x = torch.randn(1, 3, 8, 8)
    ep = torch.export.export(model, (x,), strict=False)
    with torch.no_grad():
        np.savez(root / "eager.npz", *[o.numpy() for o in model(x)])
    np.savez(root / "inputs.npz", x.numpy())
    programs, owners = {}, {}
    if order == "edgetorch-first":
        import edgetorch.exir

        early = edgetorch.exir.to_edge(ep)  # its graph holds the ops edgetorch defined
        for kind in ("portable", "xnnpack"):
            programs[f"edgetorch-{kind}"] = _edgetorch(ep, kind == "xnnpack")
        owners["edgetorch lowered"] = _owners()
        import executorch.exir  # noqa: F401

        owners["executorch imported"] = _owners()
        for kind in ("portable", "xnnpack"):
            programs[f"executorch-{kind}"] = _executorch(ep, kind == "xnnpack")
            programs[f"edgetorch-again-{kind}"] = _edgetorch(ep, kind == "xnnpack")
        programs["edgetorch-early-edge"] = early.to_executorch().buffer
    elif order == "executorch-first":
        import executorch.exir  # noqa: F401

        for kind in ("portable", "xnnpack"):
            programs[f"executorch-{kind}"] = _executorch(ep, kind == "xnnpack")
        import edgetorch.exir  # noqa: F401

        for kind in ("portable", "xnnpack"):
            programs[f"edgetorch-{kind}"] = _edgetorch(ep, kind == "xnnpack")
        owners["edgetorch lowered"] = _owners()
    else:
        raise SystemExit(f"unknown order {order!r}; expected edgetorch-first or executorch-first")
    for label, pte in programs.items():
        root.joinpath(f"{label}.pte").write_bytes(pte)
    root.joinpath("report.json").write_text(json.dumps({"programs": sorted(programs), "owners": owners}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
