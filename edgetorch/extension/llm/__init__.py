"""LLMs on edgetorch, as ExecuTorch's ``executorch.extension.llm``.

``custom_ops`` (the ``llama::`` operators), ``model`` (Llama-family and GPT-2 definitions with a KV
cache) and ``export`` (checkpoint -> ``.pte``) are the compiler half and import torch; ``runner`` (the
text runner and tokenizers) is torch-free. This package file imports nothing, so either half can be
used alone.
"""
