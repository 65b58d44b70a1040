"""``LlmConfig``: what ``export_llm`` exports, in ExecuTorch's sections and field names.

The sections and fields are those of ExecuTorch's ``LlmConfig`` that edgetorch's
exporter implements (``base``, ``model``, ``export``, ``debug``, ``quantization``,
``backend.xnnpack``). A config comes from a YAML file (``LlmConfig.from_yaml``)
and/or ``section.field=value`` overrides (``LlmConfig.from_overrides``, the
``export_llm`` command line); a key this exporter does not have is refused with
the keys it does have. Standard library only (PyYAML to read YAML files).
"""

from __future__ import annotations

import dataclasses
import json
import typing
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from edgetorch.errors import EdgetorchError

__all__ = [
    "BackendConfig",
    "LlmConfigError",
    "BaseConfig",
    "DebugConfig",
    "DtypeOverride",
    "ExportConfig",
    "LlmConfig",
    "ModelConfig",
    "QuantizationConfig",
    "XNNPackConfig",
]


class LlmConfigError(EdgetorchError, ValueError):
    """An LlmConfig file or override names a key this exporter does not have, or a value of the wrong type."""


class DtypeOverride(StrEnum):
    fp32 = "fp32"
    bf16 = "bf16"


@dataclass
class BaseConfig:
    """The model: ``checkpoint`` (a Hugging Face folder or a ``.gguf`` file), the name the output is given by
    default (``model_class``), and extra constant methods (``metadata``, a JSON object such as
    ``'{"get_bos_id": 1, "get_eos_ids": [2]}'``)."""

    model_class: str = "llama3"
    checkpoint: str | None = None
    metadata: str | None = None


@dataclass
class ModelConfig:
    dtype_override: DtypeOverride = DtypeOverride.fp32
    enable_dynamic_shape: bool = True
    use_kv_cache: bool = False
    use_sdpa_with_kv_cache: bool = False


@dataclass
class ExportConfig:
    max_seq_length: int = 128
    max_context_length: int = 128
    output_dir: str = "."
    output_name: str | None = None


@dataclass
class DebugConfig:
    verbose: bool = False


@dataclass
class QuantizationConfig:
    """``qmode``: None, ``int8`` or ``8da4w``; ``embedding_quantize``: ``"<bits>,<group size>"``;
    ``group_size``: of 8da4w's int4 weights (default 32)."""

    qmode: str | None = None
    embedding_quantize: str | None = None
    group_size: int | None = None


@dataclass
class XNNPackConfig:
    """``enabled``: lower to XNNPACK. ``extended_ops`` is accepted for ExecuTorch's configs; edgetorch's
    partitioner always takes every op it supports."""

    enabled: bool = False
    extended_ops: bool = False


@dataclass
class BackendConfig:
    xnnpack: XNNPackConfig = field(default_factory=XNNPackConfig)


@dataclass
class LlmConfig:
    base: BaseConfig = field(default_factory=BaseConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    quantization: QuantizationConfig = field(default_factory=QuantizationConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)

    @classmethod
    def from_yaml(cls, path: str | Path, overrides: list[str] | None = None) -> LlmConfig:
        """The config in YAML file ``path`` (nested sections, as ExecuTorch's), then ``overrides``."""
        try:
            import yaml
        except ImportError:
            raise ImportError("reading an LlmConfig YAML file needs PyYAML: pip install pyyaml") from None
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        if not isinstance(data, dict):
            raise LlmConfigError(f"{path}: expected a mapping of sections (base:, model:, ...), found {data!r}")
        config = cls()
        _update(config, data, "")
        return config.with_overrides(overrides or [])

    @classmethod
    def from_overrides(cls, overrides: list[str]) -> LlmConfig:
        """The default config with ``section.field=value`` overrides applied."""
        return cls().with_overrides(overrides)

    def with_overrides(self, overrides: list[str]) -> LlmConfig:
        """Apply ``section.field=value`` overrides in place (values parsed as YAML scalars); returns self."""
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or not key:
                raise LlmConfigError(
                    f"an override is section.field=value (e.g. model.use_kv_cache=True); found {item!r}"
                )
            *path, name = key.split(".")
            target: Any = self
            for part in path:
                target = _child(target, part, key)
            _set(target, name, _scalar(text), key)
        return self

    def metadata_dict(self) -> dict[str, Any] | None:
        """``base.metadata`` parsed (a JSON object), or None."""
        if not self.base.metadata:
            return None
        try:
            value = json.loads(self.base.metadata)
        except json.JSONDecodeError as e:
            raise LlmConfigError(f"base.metadata must be a JSON object; {e}") from None
        if not isinstance(value, dict):
            raise LlmConfigError(f"base.metadata must be a JSON object; found {value!r}")
        return value


def _fields(obj: Any) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(obj)}


def _child(obj: Any, name: str, key: str) -> Any:
    value = getattr(obj, name, None) if name in _fields(obj) else None
    if not dataclasses.is_dataclass(value):
        raise LlmConfigError(f"{key}: {type(obj).__name__} has no section {name!r}; it has {sorted(_sections(obj))}")
    return value


def _sections(obj: Any) -> list[str]:
    return [n for n in _fields(obj) if dataclasses.is_dataclass(getattr(obj, n))]


def _update(obj: Any, data: dict[str, Any], prefix: str) -> None:
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict):
            _update(_child(obj, name, key), value, f"{key}.")
        else:
            _set(obj, name, value, key)


def _set(obj: Any, name: str, value: Any, key: str) -> None:
    fields = _fields(obj)
    if name not in fields or name in _sections(obj):
        known = sorted(n for n in fields if n not in _sections(obj))
        raise LlmConfigError(
            f"{key}: edgetorch's export_llm has no option {name!r} in {type(obj).__name__}; it has {known}"
        )
    setattr(obj, name, _coerce(value, typing.get_type_hints(type(obj))[name], key))


def _coerce(value: Any, annotation: Any, key: str) -> Any:
    options = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, _UnionType) else ()
    if options:
        if value is None and type(None) in options:
            return None
        annotation = next(a for a in options if a is not type(None))
    if isinstance(annotation, type) and issubclass(annotation, StrEnum):
        try:
            return annotation(value)
        except ValueError:
            raise LlmConfigError(f"{key} must be one of {[m.value for m in annotation]}; found {value!r}") from None
    if annotation is bool and isinstance(value, bool):
        return value
    if annotation is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if annotation is str and value is not None and not isinstance(value, (dict, list)):
        return str(value)
    raise LlmConfigError(f"{key} takes a {getattr(annotation, '__name__', annotation)}; found {value!r}")


def _scalar(text: str) -> Any:
    """An override's value as YAML reads a scalar (True/false/12/null/text)."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "none", "~"):
        return None
    try:
        return int(text)
    except ValueError:
        return text


_UnionType = type(int | None)
