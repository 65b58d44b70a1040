"""``TrainingModule`` and its loaders at ExecuTorch's path; they live in ``extension.training.module``.
Torch-free."""

from edgetorch.extension.training.module import (
    TrainingModule,
    _load_for_executorch_for_training,
    _load_for_executorch_for_training_from_buffer,
)

__all__ = ["TrainingModule", "_load_for_executorch_for_training", "_load_for_executorch_for_training_from_buffer"]
