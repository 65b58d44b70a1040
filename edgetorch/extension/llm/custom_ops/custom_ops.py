"""Importing this module registers the ``llama`` custom ops (``torch.ops.llama.sdpa_with_kv_cache``,
``custom_sdpa``, ``update_cache``), as importing ExecuTorch's
``executorch.extension.llm.custom_ops.custom_ops`` does. May import torch only."""

from edgetorch.extension.llm.custom_ops import LIBRARY, ensure_registered

ensure_registered()

__all__ = ["LIBRARY", "ensure_registered"]
