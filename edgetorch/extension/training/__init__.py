"""On-device training, as ``executorch.extension.training``. Torch-free.

Compile a model whose forward returns its loss with ``torch.export.experimental._export_forward_backward``,
``to_edge`` and ``to_executorch`` (edgetorch's or ExecuTorch's); then::

    module = _load_for_executorch_for_training("model.pte")
    module.forward_backward("forward", (x, y))          # the loss (and other user outputs)
    sgd = get_sgd_optimizer(module.named_parameters(), lr=0.1, momentum=0.9)
    sgd.step(module.named_gradients())                   # updates the program's parameters in place
"""

from edgetorch.extension.training.module import (
    TrainingModule,
    _load_for_executorch_for_training,
    _load_for_executorch_for_training_from_buffer,
)
from edgetorch.extension.training.optimizer import SGD, get_sgd_optimizer

__all__ = [
    "SGD",
    "TrainingModule",
    "_load_for_executorch_for_training",
    "_load_for_executorch_for_training_from_buffer",
    "get_sgd_optimizer",
]
