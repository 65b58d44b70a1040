"""``python -m edgetorch.extension.llm.export.export_llm``: ExecuTorch's LLM export command.

    python -m edgetorch.extension.llm.export.export_llm --config llm.yaml export.max_seq_length=256
    python -m edgetorch.extension.llm.export.export_llm base.checkpoint=model_dir backend.xnnpack.enabled=True

``--config`` reads an ``LlmConfig`` YAML file; the other arguments are
``section.field=value`` overrides applied after it. ``export_from_config`` (also
named ``export_llama``, ExecuTorch's name) is the same from Python. ``main()``
without arguments reads ``sys.argv`` in ExecuTorch's two steps: ``parse_config_arg``
splits off ``--config``, then ``hydra_main`` builds the config from the file and
the overrides and exports it. May import torch.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export.config.llm_config import LlmConfig
from edgetorch.extension.llm.export.exporter import export_llm

__all__ = ["export_from_config", "export_llama", "hydra_main", "main", "parse_config_arg", "pop_config_arg"]


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


export_llama = export_from_config


def parse_config_arg() -> tuple[str | None, list[str]]:
    """``sys.argv``'s ``--config`` value (None when absent) and the arguments left after it."""
    parser = argparse.ArgumentParser(add_help=True)
    parser.add_argument("--config", type=str, help="an LlmConfig YAML file")
    args, remaining = parser.parse_known_args()
    return args.config, remaining


def pop_config_arg() -> str:
    """Remove ``--config <path>`` from ``sys.argv`` and return the path."""
    try:
        index = sys.argv.index("--config")
        value = sys.argv[index + 1]
    except (ValueError, IndexError):
        raise InvalidInputError(
            f"expected '--config <LlmConfig YAML file>' in the command line; found {sys.argv[1:]!r}"
        ) from None
    del sys.argv[index : index + 2]
    return value


def hydra_main(config_path: str | None = None, overrides: list[str] | None = None) -> Path:
    """Build the ``LlmConfig`` from ``config_path`` (a YAML file, or None for the defaults) and the
    ``section.field=value`` ``overrides`` (default: ``sys.argv[1:]``), then export it with ``export_llama``."""
    overrides = list(sys.argv[1:] if overrides is None else overrides)
    config = LlmConfig.from_yaml(config_path, overrides) if config_path else LlmConfig.from_overrides(overrides)
    if config.debug.verbose:
        logging.basicConfig(level=logging.INFO)
    output = export_llama(config)
    print(f"wrote {output}")
    return output


def main(argv: list[str] | None = None) -> Path:
    """The command: ``argv`` (default ``sys.argv[1:]``) is ``[--config FILE] [section.field=value ...]``."""
    if argv is None:
        config_path, _ = parse_config_arg()
        if config_path:
            pop_config_arg()
        return hydra_main(config_path, sys.argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m edgetorch.extension.llm.export.export_llm",
        description="Export an LLM to a .pte from an LlmConfig YAML file and/or section.field=value overrides.",
    )
    parser.add_argument("--config", help="an LlmConfig YAML file")
    parser.add_argument("overrides", nargs="*", help="section.field=value, e.g. export.max_seq_length=256")
    args = parser.parse_args(argv)
    return hydra_main(args.config, args.overrides)


if __name__ == "__main__":
    main()
