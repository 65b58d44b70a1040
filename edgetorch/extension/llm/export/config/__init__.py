"""``LlmConfig``, the configuration of ``export_llm``, at ExecuTorch's path. Standard library only (PyYAML for
``--config`` files)."""
