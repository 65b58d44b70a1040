"""Every XNNPACK delegate's plans draw their buffers from one shared scratch: results stay right when delegates
and input shapes alternate, and when two programs run in two threads at once."""

from __future__ import annotations

import threading

import numpy as np
import torch

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.backends.xnnpack.runtime.memory import SCRATCH
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime


class _Broken(torch.nn.Module):
    """Three delegated linear blocks, split by cumsum (which stays in the portable program)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(16, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 8)

    def forward(self, x):
        h = torch.cumsum(torch.relu(self.a(x)), -1)
        return self.c(torch.cumsum(torch.relu(self.b(h)), -1))


def _program(seed: int):
    torch.manual_seed(seed)
    model = _Broken().eval()
    dynamic = ({0: torch.export.Dim("rows", min=1, max=32)},)
    ep = torch.export.export(model, (torch.randn(4, 16),), dynamic_shapes=dynamic)
    pte = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    return model, Runtime.get().load_program(pte).load_method("forward")


def _expected(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def test_delegates_and_shapes_alternate_on_shared_memory():
    model, method = _program(0)
    delegates = [handle for _, handle in method._executor.delegates]  # this method's, not other tests' left over
    rng = np.random.default_rng(0)
    for rows in (4, 7, 4, 1, 32, 7):
        x = rng.standard_normal((rows, 16)).astype(np.float32)
        np.testing.assert_allclose(method.execute([x])[0], _expected(model, x), rtol=1e-5, atol=1e-5)
    ours = [d for d in delegates if d.schedules]
    assert len(ours) == 3
    # Every plan lays its buffers out from the start of the same scratch: the first delegate's input copy and
    # the second's occupy the same bytes (their calls never overlap), and both live in the shared chunks.
    first, second = (next(iter(d.schedules.values())).inputs[0] for d in ours[:2])
    assert np.shares_memory(first, second)
    assert any(np.shares_memory(first, chunk) for chunk in SCRATCH)


def test_two_programs_in_two_threads():
    programs = [_program(seed) for seed in (1, 2)]
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal((rows, 16)).astype(np.float32) for rows in (3, 9, 5)]
    failures: list[str] = []

    def run(model, method) -> None:
        for _ in range(30):
            for x in inputs:
                got, want = method.execute([x])[0], _expected(model, x)
                if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                    failures.append(f"rows {x.shape[0]}: off by {np.abs(got - want).max()}")

    threads = [threading.Thread(target=run, args=program) for program in programs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures[:3]


def test_a_file_program_drops_its_pages_and_still_runs(tmp_path):
    # After each delegate's init the runtime lets the OS drop the mapped file's pages; what a run reads again
    # comes back from the page cache, so results are unchanged, also after another release.
    torch.manual_seed(3)
    model = _Broken().eval()
    ep = torch.export.export(model, (torch.randn(5, 16),))
    path = tmp_path / "broken.pte"
    path.write_bytes(to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer)
    program = Runtime.get().load_program(path)
    method = program.load_method("forward")
    x = np.random.default_rng(3).standard_normal((5, 16)).astype(np.float32)
    first = method.execute([x])[0].copy()
    program.release_pages()
    np.testing.assert_array_equal(method.execute([x])[0], first)
    np.testing.assert_allclose(first, _expected(model, x), rtol=1e-5, atol=1e-5)


def test_scratch_slots_start_on_cache_lines():
    """Every buffer the schedules take from the shared scratch starts 64-byte aligned (a cache line, a 16-lane
    vector), whatever the chunk's allocation gave."""
    from edgetorch.backends.xnnpack.runtime import memory

    cursor = memory._Cursor()
    shapes = [(5, 7), (3,), (1, 1), (4 << 20,), (13, 2)]
    assert all(cursor.take(s, np.dtype(np.float32)).ctypes.data % 64 == 0 for s in shapes)
