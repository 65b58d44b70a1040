"""The ``XNNGraph`` schema as dataclasses, at ExecuTorch's path; they live in ``backends.xnnpack.schema``.
Torch-free."""

from edgetorch.backends.xnnpack.schema import *  # noqa: F403  (the whole schema is this module's API)
