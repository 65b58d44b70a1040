"""``AddMulPartitionerDemo`` where the tutorial imports it (defined in ``edgetorch.backends.demo.compiler``)."""

from edgetorch.backends.demo.compiler import AddMulPartitionerDemo

__all__ = ["AddMulPartitionerDemo"]
