"""LLM export (``executorch.extension.llm.export``): ``export_llm(checkpoint, ...)`` and its steps live in
``exporter``; ``python -m edgetorch.extension.llm.export.export_llm`` is ExecuTorch's command, configured by
an ``LlmConfig`` (``config.llm_config``). May import torch.

``export_llm`` is also the name of the command module, and importing a submodule sets the package attribute
of its name. The command module is imported first, then the function binds the name: a later import finds the
module loaded and leaves the attribute alone, so ``export_llm`` here is always the function.
"""

import edgetorch.extension.llm.export.export_llm  # noqa: F401  (first: see above)
from edgetorch.extension.llm.export.exporter import (
    build_model,
    export_llm,
    export_program,
    load_checkpoint,
    metadata_of,
    quantize_model,
)

__all__ = ["build_model", "export_llm", "export_program", "load_checkpoint", "metadata_of", "quantize_model"]
