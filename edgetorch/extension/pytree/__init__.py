"""``executorch.extension.pytree``: flattening nested Python containers of tensors into a leaf list and a spec.

ExecuTorch's pip wheel serves these names from ``torch.utils._pytree`` (its C++ pytree bindings are not
built into it), and so does edgetorch: a spec made here is torch's ``TreeSpec``, the one
``torch.export`` records in a program's call spec. ``TreeSpec.to_str`` / ``from_str`` give the spec's
JSON text, as ExecuTorch's emitter stores it in a program's ``container_meta_type``. Imports torch.
"""

from torch.utils import _pytree

TreeSpec = _pytree.TreeSpec
tree_flatten = _pytree.tree_flatten
tree_unflatten = _pytree.tree_unflatten
tree_map = _pytree.tree_map
broadcast_to_and_flatten = _pytree._broadcast_to_and_flatten
register_custom = _pytree._register_pytree_node
from_str = _pytree.treespec_loads

# ExecuTorch gives torch's TreeSpec this method when it serves torch's pytree; code written for
# ExecuTorch calls ``spec.to_str()``.
if not hasattr(TreeSpec, "to_str"):
    TreeSpec.to_str = _pytree.treespec_dumps  # type: ignore[attr-defined]

__all__ = [
    "TreeSpec",
    "broadcast_to_and_flatten",
    "from_str",
    "register_custom",
    "tree_flatten",
    "tree_map",
    "tree_unflatten",
]
