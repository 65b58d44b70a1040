"""The pure-NumPy tier is complete without the ``[fast]`` extras: in a fresh process where numba cannot be
imported (absent, or installed but failing to import), an XNNPACK-delegated CNN and a portable program run
and match eager, and nothing imports numba."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torch import nn

from edgetorch.backends.xnnpack import XnnpackPartitioner
from edgetorch.exir import to_edge, to_edge_transform_and_lower

# Absent: numba's (and llvmlite's) lookup fails as for a package that is not installed. Broken: it is found,
# but importing it raises (an llvmlite that does not match, say). torch is blocked as in tests/runtime.
BLOCKERS = {
    "absent": """
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("numba", "llvmlite"):
                raise ModuleNotFoundError("No module named " + repr(name))
    """,
    "broken": """
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("numba", "llvmlite"):
                return importlib.machinery.ModuleSpec(name, self)
        def create_module(self, spec):
            return None
        def exec_module(self, module):
            raise ImportError("numba is broken for this test")
    """,
}


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6(),
            nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8), nn.BatchNorm2d(8), nn.ReLU6(),
            nn.Conv2d(8, 12, 1),
        )  # fmt: skip
        self.head = nn.Linear(12, 4)

    def forward(self, x):
        return self.head(self.body(x).mean((2, 3)))


@pytest.mark.parametrize("how", sorted(BLOCKERS))
def test_the_numpy_tier_runs_without_numba(how, tmp_path):
    torch.manual_seed(0)
    model, x = Cnn().eval(), torch.randn(2, 3, 10, 10)
    ep = torch.export.export(model, (x,))
    (tmp_path / "xnnpack.pte").write_bytes(
        to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
    )
    (tmp_path / "portable.pte").write_bytes(to_edge(ep).to_executorch().buffer)
    np.save(tmp_path / "x.npy", x.numpy())
    blocker = "import importlib.abc, importlib.machinery, sys\nclass Block(importlib.abc.MetaPathFinder, importlib.abc.Loader):"
    blocker += textwrap.indent(textwrap.dedent(BLOCKERS[how]), "    ")
    blocker += textwrap.dedent(
        """
        class BlockTorch(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("torch", "executorch"):
                    raise ImportError("blocked for this test: " + name)
        sys.meta_path[:0] = [Block(), BlockTorch()]
        """
    )
    script = blocker + textwrap.dedent(
        f"""
        import numpy as np
        from edgetorch.runtime import Runtime, policy
        x = np.load({str(tmp_path / "x.npy")!r})
        for name in ("xnnpack", "portable"):
            with open({str(tmp_path)!r} + "/" + name + ".pte", "rb") as f:
                method = Runtime.get().load_program(f.read()).load_method("forward")
            np.save({str(tmp_path)!r} + "/" + name + ".npy", method.execute([x])[0])
        assert not policy.compiled_tier(), "the fast tier claims to be usable"
        assert not any(m.split(".")[0] in ("numba", "llvmlite", "torch") for m in sys.modules), "imported"
        """
    )
    env = {"PATH": "/usr/bin:/bin"}  # no EDGETORCH_FAST: the tier must notice by itself
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    with torch.no_grad():
        want = model(x).numpy()
    for name in ("xnnpack", "portable"):
        np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), want, rtol=1e-4, atol=1e-5)
