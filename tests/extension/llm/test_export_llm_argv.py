"""export_llm's sys.argv entry points: ``--config`` split off, the overrides reaching the exporter's config."""

from __future__ import annotations

import importlib
import sys

import pytest

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export.config.llm_config import LlmConfig

# the package exports the function export_llm, which hides the module of that name
cli = importlib.import_module("edgetorch.extension.llm.export.export_llm")


def test_parse_and_pop_config_arg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["export_llm", "--config", "a.yaml", "export.max_seq_length=64"])
    assert cli.parse_config_arg() == ("a.yaml", ["export.max_seq_length=64"])
    assert cli.pop_config_arg() == "a.yaml"
    assert sys.argv == ["export_llm", "export.max_seq_length=64"]
    monkeypatch.setattr(sys, "argv", ["export_llm", "debug.verbose=False"])
    assert cli.parse_config_arg() == (None, ["debug.verbose=False"])
    with pytest.raises(InvalidInputError, match="--config"):
        cli.pop_config_arg()


def test_main_from_argv_merges_file_and_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    config_file = tmp_path / "llm.yaml"
    config_file.write_text("base:\n  model_class: tiny\nexport:\n  max_seq_length: 32\n", encoding="utf-8")
    seen: list[LlmConfig] = []
    monkeypatch.setattr(cli, "export_llama", lambda config: seen.append(config) or tmp_path / "out.pte")
    monkeypatch.setattr(sys, "argv", ["export_llm", "--config", str(config_file), "export.max_seq_length=48"])
    assert cli.main() == tmp_path / "out.pte"
    (config,) = seen
    assert config.base.model_class == "tiny"
    assert config.export.max_seq_length == 48
