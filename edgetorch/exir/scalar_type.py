"""``ScalarType`` (the schema's dtype codes) at ExecuTorch's ``exir.scalar_type``; see :mod:`edgetorch.format.program`."""

from edgetorch.format.program import ScalarType

__all__ = ["ScalarType"]
