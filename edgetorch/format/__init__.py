"""On-disk formats (``.pte``, ``.ptd``) and nothing else. Torch-free."""
