"""The runtime imports and runs a program with torch and executorch blocked from import."""

import subprocess
import sys
import textwrap

import numpy as np
import torch

from tests.interop.models import MODELS
from tests.oracle import eager, executorch_pte

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "executorch", "torchao"):
                raise ImportError("blocked for this test: " + name)
    sys.meta_path.insert(0, Block())
    """
)


def test_runtime_runs_with_torch_blocked(tmp_path):
    factory, make_args, _ = MODELS["mlp"]
    model, args = factory().eval(), make_args()
    (tmp_path / "m.pte").write_bytes(executorch_pte(model, args))
    np.save(tmp_path / "x.npy", args[0].numpy())
    script = BLOCKER + textwrap.dedent(
        f"""
        import numpy as np
        import edgetorch.runtime as rt
        import edgetorch.format, edgetorch.runtime.kernels, edgetorch.extension.training
        out = rt.Module({str(tmp_path / "m.pte")!r}).forward(np.load({str(tmp_path / "x.npy")!r}))
        np.save({str(tmp_path / "y.npy")!r}, out[0])
        assert not any(m.split(".")[0] in ("torch", "executorch") for m in sys.modules), "torch was imported"
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), eager(model, args)[0], rtol=1e-4, atol=1e-5)
    assert isinstance(torch.__version__, str)
