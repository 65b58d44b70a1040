"""``edgetorch.extension.pybindings.portable_lib``: ExecuTorch's pybindings entry points over the NumPy runtime."""
