"""``edgetorch debug FILE.py:FACTORY``: the clean model passes, a planted wrong kernel is named with its source
line, and ``--inputs`` decides: the bug hides on positive inputs and shows on the example ones."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np

from edgetorch.cli import main
from tests.devtools.helpers import leaky_relu, planted_kernel

FACTORY = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.fc1(torch.relu(x)))  # THE RELU LINE

def make():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(4, 6),)
"""


def _debug(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["debug", *argv])
    return code, out.getvalue()


def test_debug_command_finds_a_planted_kernel_bug_only_on_inputs_that_reach_it(tmp_path):
    from matplotlib.image import imread

    (tmp_path / "net.py").write_text(FACTORY)
    spec = f"{tmp_path / 'net.py'}:make"
    code, out = _debug(spec, "--plot", str(tmp_path / "clean.png"))
    assert code == 0 and "no operator diverges" in out and imread(tmp_path / "clean.png").shape[:2] == (400, 1000)

    with planted_kernel("aten::relu.out", leaky_relu):
        positive = np.abs(np.random.default_rng(0).standard_normal((4, 6))).astype(np.float32) + 0.1
        np.savez(tmp_path / "positive.npz", positive)  # relu passes these through: the bug never shows
        code, out = _debug(spec, "--inputs", str(tmp_path / "positive.npz"))
        assert code == 0 and "no operator diverges" in out  # real inputs that never reach the bug
        code, out = _debug(spec, "--plot", str(tmp_path / "bug.png"))
    assert code == 1 and "first divergence" in out and "aten.relu.default" in out
    assert "net.py" in out and "THE RELU LINE" in out
    assert (tmp_path / "bug.png").stat().st_size > 0
