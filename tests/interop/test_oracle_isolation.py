"""ExecuTorch's runtime runs each program in a process of its own: its crash fails one call, never the suite."""

import numpy as np
import pytest
import torch

from tests.oracle import ExecuTorchCrashed, executorch_pte, run_executorch


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
