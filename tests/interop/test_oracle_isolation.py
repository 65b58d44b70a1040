"""ExecuTorch's runtime runs each program in a process of its own: its crash fails one call, never the suite."""

import subprocess

import numpy as np
import pytest
import torch

from tests.oracle import ExecuTorchCrashed, _ForkServer, executorch_pte, run_executorch


class _Reduce(torch.nn.Module):
    def forward(self, x):
        return torch.logsumexp(x, dim=0)


def test_a_crash_fails_one_call_and_the_next_program_runs():
    # ExecuTorch 1.5.1's portable logsumexp aborts (SIGABRT) on a 0-d input; the same program on a vector runs.
    crashing = executorch_pte(_Reduce(), (torch.tensor(0.5),))
    healthy = executorch_pte(_Reduce(), (torch.arange(4.0),))
    with pytest.raises(ExecuTorchCrashed, match="signal SIGABRT"):
        run_executorch(crashing, [torch.tensor(0.5)])
    (out,) = run_executorch(healthy, [torch.arange(4.0)])
    np.testing.assert_allclose(out, torch.logsumexp(torch.arange(4.0), 0).numpy(), rtol=1e-6)


def test_the_fork_server_reader_keeps_lines_that_arrive_together():
    # A child that ends at once makes the server write "pid" and "status" in one burst; both must be read, the
    # second without waiting on an empty pipe (a buffered reader swallowed it and desynchronised the protocol).
    server = object.__new__(_ForkServer)
    writer = "printf 'pid 41\\nstatus -6\\npid 42\\n'; exec sleep 30"  # the pipe stays open, as the server's does
    server.proc = subprocess.Popen(["sh", "-c", writer], stdout=subprocess.PIPE)
    server._pending = b""
    assert [server._line(5), server._line(0.5), server._line(0.5)] == ["pid 41", "status -6", "pid 42"]
    server.proc.kill()
    server.proc.wait()
    with pytest.raises(ExecuTorchCrashed, match="exited"):
        server._line(5)
