"""Helpers at the import paths ExecuTorch's XNNPACK backend has them (``executorch.backends.xnnpack.utils``)."""
