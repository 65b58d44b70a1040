"""``TensorLayout`` (dtype, sizes, dim order of named tensor data) at ExecuTorch's ``exir.tensor_layout``.

The type is the ``.ptd`` schema's, from :mod:`edgetorch.format.ptd`; ``tensor_layout_of`` gives a
tensor's (ExecuTorch's ``TensorLayout.from_tensor``).
"""

from edgetorch.exir.named_data_store import tensor_layout_of
from edgetorch.format.ptd import TensorLayout

__all__ = ["TensorLayout", "tensor_layout_of"]
