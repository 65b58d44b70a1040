"""Graph passes for XNNPACK lowering, at ExecuTorch's path (``executorch.backends.xnnpack._passes``).

edgetorch's XNNPACK serializer does its layout, fusion and batch-norm work
while it writes the blob (``backends.xnnpack.serialize``, ``preprocess``), so
only the pass ExecuTorch runs before partitioning (``get_transform_passes``)
is a pass here. Imports torch.
"""

from edgetorch.backends.xnnpack._passes.remove_noop_expand_copy_pass import RemoveNoopExpandCopyPass

__all__ = ["RemoveNoopExpandCopyPass"]
