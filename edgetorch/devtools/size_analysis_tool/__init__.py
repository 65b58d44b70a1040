"""Where a model's bytes go: ``size_analysis_tool.generate_model_size_information`` (ExecuTorch's path)."""
