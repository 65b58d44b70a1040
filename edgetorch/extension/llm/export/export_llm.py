"""``python -m edgetorch.extension.llm.export.export_llm``: ExecuTorch's LLM export command.

    python -m edgetorch.extension.llm.export.export_llm --config llm.yaml export.max_seq_length=256
    python -m edgetorch.extension.llm.export.export_llm base.checkpoint=model_dir backend.xnnpack.enabled=True

``--config`` reads an ``LlmConfig`` YAML file; the other arguments are
``section.field=value`` overrides applied after it. ``export_from_config`` is
the same from Python. May import torch.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export.config.llm_config import LlmConfig
from edgetorch.extension.llm.export.exporter import export_llm

__all__ = ["export_from_config", "main"]


def export_from_config(llm_config: LlmConfig) -> Path:
    """Export the model ``llm_config`` describes and write it; returns the ``.pte`` path
    (``export.output_dir``/``export.output_name``, by default ``<base.model_class>.pte``)."""
    base, model, export, quantization = llm_config.base, llm_config.model, llm_config.export, llm_config.quantization
    if not base.checkpoint:
        raise InvalidInputError("base.checkpoint is needed: a Hugging Face model folder or a .gguf file")
    if not model.enable_dynamic_shape:
        raise InvalidInputError(
            "model.enable_dynamic_shape=False is not supported: edgetorch exports the prompt length as dynamic"
        )
    name = export.output_name or f"{base.model_class}.pte"
    output = Path(export.output_dir) / (name if name.endswith(".pte") else f"{name}.pte")
    output.parent.mkdir(parents=True, exist_ok=True)
    export_llm(
        base.checkpoint,
        output,
        backend="xnnpack" if llm_config.backend.xnnpack.enabled else "portable",
        max_seq_len=export.max_seq_length,
        max_context_len=export.max_context_length,
        dtype=model.dtype_override.value,
        quantize=quantization.qmode or "none",
        group_size=quantization.group_size or 32,
        use_kv_cache=model.use_kv_cache,
        use_sdpa_with_kv_cache=model.use_sdpa_with_kv_cache,
        embedding_quantize=quantization.embedding_quantize,
        metadata=llm_config.metadata_dict(),
    )
    return output


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(
        prog="python -m edgetorch.extension.llm.export.export_llm",
        description="Export an LLM to a .pte from an LlmConfig YAML file and/or section.field=value overrides.",
    )
    parser.add_argument("--config", help="an LlmConfig YAML file")
    parser.add_argument("overrides", nargs="*", help="section.field=value, e.g. export.max_seq_length=256")
    args = parser.parse_args(argv)
    config = (
        LlmConfig.from_yaml(args.config, args.overrides) if args.config else LlmConfig.from_overrides(args.overrides)
    )
    if config.debug.verbose:
        logging.basicConfig(level=logging.INFO)
    output = export_from_config(config)
    print(f"wrote {output}")
    return output


if __name__ == "__main__":
    main()
