"""The XNNPACK delegate's serialization at ExecuTorch's path (``executorch.backends.xnnpack.serialization``):
the ``XNNGraph`` schema and the blob writer. Torch-free."""
