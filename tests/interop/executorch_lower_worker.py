"""Lowers a saved ``torch.export`` program with ExecuTorch's own XNNPACK path, in a process of its own.

``python -m tests.interop.executorch_lower_worker PROGRAM.pt2 OUT.pte``: ``torch.export.load`` the program, then
ExecuTorch's ``to_edge_transform_and_lower`` with its ``XnnpackPartitioner``, ``to_executorch`` and the bytes
into OUT.pte (tests/interop/test_vision.py): nothing of ExecuTorch's compiler enters the test process, which
lowers the same program with edgetorch's.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(program: str, out: str) -> None:
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    ep = torch.export.load(program)
    Path(out).write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
