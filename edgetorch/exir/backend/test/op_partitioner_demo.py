"""``AddMulPartitionerDemo`` where the tutorial imports it (defined in ``edgetorch.exir.backend.demo``)."""

from edgetorch.exir.backend.demo import AddMulPartitionerDemo

__all__ = ["AddMulPartitionerDemo"]
