"""Graph transforms shared by backends (as ExecuTorch's ``executorch.backends.transforms``). Import torch."""
