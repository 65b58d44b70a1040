"""Test helpers: the real ExecuTorch as the format oracle, PyTorch eager as the numerical oracle."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch


def executorch_pte(
    model: torch.nn.Module, args: tuple, dynamic_shapes: Any = None, xnnpack: bool = False, **kw
) -> bytes:
    """Lower ``model`` with the real ExecuTorch 1.5.1 and return the .pte bytes."""
    from executorch.exir import to_edge, to_edge_transform_and_lower

    ep = torch.export.export(model.eval(), args, dynamic_shapes=dynamic_shapes, strict=False)
    if xnnpack:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return to_edge(ep, **kw).to_executorch().buffer


@functools.cache
def executorch_runtime() -> Any:
    from executorch.runtime import Runtime

    return Runtime.get()


def run_executorch(pte: bytes, inputs: list, method: str = "forward") -> list:
    """Run a .pte on the real ExecuTorch runtime; outputs as NumPy arrays."""
    m = executorch_runtime().load_program(pte).load_method(method)
    outs = m.execute([torch.as_tensor(x) if isinstance(x, np.ndarray) else x for x in inputs])
    return [o.numpy() if isinstance(o, torch.Tensor) else o for o in outs]


def eager(model: torch.nn.Module, args: tuple) -> list:
    """Eager outputs flattened to a list of NumPy arrays / scalars."""
    with torch.no_grad():
        out = model(*args)
    flat = torch.utils._pytree.tree_leaves(out)
    return [o.detach().numpy() if isinstance(o, torch.Tensor) else o for o in flat]


def assert_close(got: list, want: list, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(
                g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=f"output {i}"
            )
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
