"""Shared steps of the devtools tests: lower with edgetorch or ExecuTorch, run traced with either runtime."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime
from edgetorch.runtime.kernels.registry import KERNELS, register_kernel
from tests.oracle import run_worker


def lower_edgetorch(model: torch.nn.Module, args: tuple, generate_etrecord: bool = False):
    """(edge manager, executorch manager) from edgetorch."""
    edge = to_edge(torch.export.export(model, args), generate_etrecord=generate_etrecord)
    return edge, edge.to_executorch()


def run_edgetorch(pte: bytes | Path, args: tuple, tmp: Path, runs: int = 2, debug: bool = True) -> tuple[Path, Path]:
    """Run ``pte`` ``runs`` times in edgetorch's runtime with an ETDump (and a debug buffer); the two paths."""
    program = Runtime.get().load_program(pte, enable_etdump=True, debug_buffer_size=(1 << 22) if debug else 0)
    method = program.load_method("forward")
    for _ in range(runs):
        method.execute([a.numpy() for a in args])
    etdump, buffer = tmp / "edgetorch.etdp", tmp / "edgetorch.bin"
    program.write_etdump_result_to_file(etdump, buffer if debug else None)
    return etdump, buffer


def run_executorch(pte: bytes, args: tuple, tmp: Path, runs: int = 2) -> tuple[Path, Path]:
    """The same with ExecuTorch's runtime, in a process of its own (``executorch_etdump_worker``)."""
    (tmp / "model.pte").write_bytes(pte)
    np.savez(tmp / "inputs.npz", *[a.numpy() for a in args])
    (tmp / "request.json").write_text(json.dumps({"runs": runs, "debug": True}))
    run_worker("tests.devtools.executorch_etdump_worker", tmp, "a traced run")
    return tmp / "executorch.etdp", tmp / "executorch.bin"


@contextmanager
def planted_kernel(name: str, kernel: Callable) -> Iterator[None]:
    """Run with ``kernel`` registered as ``name`` (a planted bug), the original kernel restored after."""
    original, origin = KERNELS[name], KERNELS.origin.get(name)
    register_kernel(name, kernel)
    try:
        yield
    finally:
        KERNELS[name] = original
        if origin is not None:  # who registered it: the kernel index test reads this
            KERNELS.origin[name] = origin


def leaky_relu(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A wrong ``aten::relu.out``: lets negatives through at 1%."""
    np.multiply(x, np.where(x > 0, 1.0, 0.01).astype(x.dtype), out=out)
    return out
