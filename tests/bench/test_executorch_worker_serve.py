"""The OpInfo sweep's ExecuTorch process (``tests.executorch_worker.serve`` behind ``bench/opinfo_compare``'s
``ExecuTorchWorker``) keeps each loaded program's bytes alive while it runs the program.

ExecuTorch's ``Method`` does not hold the ``Program`` it came from, and a program loaded from bytes reads its
constants from those bytes; a worker that dropped the program after ``load_method`` ran on freed memory and
died with SIGSEGV once the allocator reused or unmapped it (the "-11 on Ray" crashes of the sweep: Ray's imports
in the child changed the heap enough to make it common). A constant larger than malloc's mmap threshold
(128 KiB) makes the freed bytes an unmapped page, so the old worker fails this test every time.
"""

from __future__ import annotations

import torch

from bench.opinfo_compare import ExecuTorchWorker

SIZE = 1 << 17  # 512 KiB of float32 constants


class AddConstant(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("c", torch.arange(SIZE, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.c


def test_a_loaded_program_outlives_the_request_that_brought_it():
    from executorch.exir import to_edge

    pte = to_edge(torch.export.export(AddConstant(), (torch.zeros(SIZE),))).to_executorch().buffer
    worker = ExecuTorchWorker()
    try:
        for _ in range(2):  # a second load replaces the first program: that one may go, the new one must stay
            worker.request("load", bytes(bytearray(pte)))  # a copy nothing in this process keeps
            for shift in (1.0, 2.0):
                (out,) = worker.request("run", [torch.full((SIZE,), shift)])
                torch.testing.assert_close(out, torch.arange(SIZE, dtype=torch.float32) + shift)
    finally:
        if worker.process is not None:
            worker.process.kill()
