"""``BackendWithCompilerDemo`` where the tutorial imports it (defined in ``edgetorch.exir.backend.demo``)."""

from edgetorch.exir.backend.demo import BackendWithCompilerDemo

__all__ = ["BackendWithCompilerDemo"]
