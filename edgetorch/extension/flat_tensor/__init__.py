"""The FlatTensor (``.ptd``) format at ExecuTorch's path (``executorch.extension.flat_tensor``). Torch-free."""
