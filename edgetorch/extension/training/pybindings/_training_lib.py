"""``get_sgd_optimizer`` at ExecuTorch's path; it lives in ``extension.training.optimizer``. Torch-free."""

from edgetorch.extension.training.optimizer import SGD, get_sgd_optimizer

ExecuTorchSGD = SGD

__all__ = ["ExecuTorchSGD", "get_sgd_optimizer"]
