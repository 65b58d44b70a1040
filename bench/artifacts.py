"""Each compiler contender's .pte (or ONNX file) for a model: what the suite and the footprint benchmark time.

Imports torch; the ExecuTorch and ONNX compilers load on first use.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import time
from collections.abc import Callable

import torch


def _edgetorch_xnnpack(ep: torch.export.ExportedProgram) -> bytes:
    from edgetorch.backends.xnnpack import XnnpackPartitioner
    from edgetorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def _edgetorch_portable(ep: torch.export.ExportedProgram) -> bytes:
    from edgetorch.exir import to_edge

    return to_edge(ep).to_executorch().buffer


def _et_xnnpack(ep: torch.export.ExportedProgram) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer


def _et_portable(ep: torch.export.ExportedProgram) -> bytes:
    from executorch.exir import to_edge

    return to_edge(ep).to_executorch().buffer


COMPILE: dict[str, Callable[[torch.export.ExportedProgram], bytes]] = {
    "edgetorch-xnnpack": _edgetorch_xnnpack,
    "edgetorch-portable": _edgetorch_portable,
    "et-xnnpack": _et_xnnpack,
    "et-portable": _et_portable,
}


def export_artifact(contender: str, model: torch.nn.Module, inputs: tuple, path_stem: pathlib.Path) -> dict:
    """Compile ``model`` for ``contender`` into a file next to ``path_stem``; returns its path, export seconds, bytes.

    Every compiler gets a fresh ``torch.export`` (under a second even for GPT-2)
    so none can see another's changes; only the compile step is timed.
    """
    if contender == "ort":
        path = path_stem.with_suffix(".onnx")
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, inputs, str(path), dynamo=True)
        seconds = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
        return {"path": str(path), "export_s": seconds, "bytes": size}
    path = path_stem.with_name(f"{path_stem.name}-{contender}.pte")
    ep = torch.export.export(model, inputs)
    t0 = time.perf_counter()
    buffer = COMPILE[contender](ep)
    seconds = time.perf_counter() - t0
    path.write_bytes(buffer)
    return {"path": str(path), "export_s": seconds, "bytes": len(buffer)}
