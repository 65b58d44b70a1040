"""The training entry points at ExecuTorch's paths (``executorch.extension.training.pybindings``). Torch-free."""
