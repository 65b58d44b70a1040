"""Extensions on top of the compiler and the runtime, as ``executorch.extension``.

``training``: on-device training of joint-graph programs (TrainingModule, SGD); ``pybindings``-style loaders
and export helpers. Each extension's runtime half imports only what the runtime does (no torch).
"""
