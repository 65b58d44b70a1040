"""``SpecPropPass`` at ExecuTorch's ``exir.passes.spec_prop_pass``; it lives in :mod:`edgetorch.exir.passes.spec_prop`."""

from edgetorch.exir.passes.spec_prop import SpecPropPass
from edgetorch.exir.tensor import make_spec

__all__ = ["SpecPropPass", "make_spec"]
