"""``portable_lib``'s modules return what ExecuTorch's pybindings return: torch tensors whenever the process has
torch (also for a constant getter, which takes no tensor in), NumPy arrays in a torch-free process."""

import subprocess
import sys

import numpy as np
import torch

from edgetorch.exir import to_edge
from edgetorch.extension.pybindings.portable_lib import _load_for_executorch, _load_for_executorch_from_buffer


class _M(torch.nn.Module):
    def forward(self, x):
        return x * 2


def _program(tmp_path):
    prog = to_edge(torch.export.export(_M(), (torch.ones(3),)), constant_methods={"get_t": torch.arange(2.0)})
    path = tmp_path / "m.pte"
    path.write_bytes(prog.to_executorch().buffer)
    return path


def test_outputs_are_tensors_when_torch_is_loaded(tmp_path):
    path = _program(tmp_path)
    module = _load_for_executorch_from_buffer(path.read_bytes())
    [got] = module.run_method("get_t", [])
    assert isinstance(got, torch.Tensor) and torch.equal(got, torch.arange(2.0))
    [doubled] = module.forward([np.ones(3, np.float32)])  # a NumPy input still gives a tensor back
    assert isinstance(doubled, torch.Tensor) and torch.equal(doubled, torch.full((3,), 2.0))
    assert isinstance(_load_for_executorch(path).forward([torch.ones(3)])[0], torch.Tensor)


def test_outputs_are_arrays_without_torch(tmp_path):
    path = _program(tmp_path)
    code = (
        "import sys, numpy as np\n"
        "sys.modules['torch'] = None\n"  # importing torch now fails
        "from edgetorch.extension.pybindings.portable_lib import _load_for_executorch\n"
        f"m = _load_for_executorch({str(path)!r})\n"
        "[t] = m.run_method('get_t', [])\n"
        "[y] = m.forward([np.ones(3, np.float32)])\n"
        "assert type(t) is np.ndarray and type(y) is np.ndarray, (type(t), type(y))\n"
        "print(t.tolist(), y.tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[0.0, 1.0] [2.0, 2.0, 2.0]"
