"""Reading and writing ``.ptd`` files: ``serialize.FlatTensorSerializer``, ``serialize.FlatTensorHeader`` and the
schema (``flat_tensor_schema``). Torch-free."""
