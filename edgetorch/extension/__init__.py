"""Extensions, as in ``executorch.extension``: runtime conveniences (pybindings-style loaders) and export helpers."""
