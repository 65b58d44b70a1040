"""The Program schema edgetorch ships as IDL is its format's own: current, and what flatc reads our files with."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.exir._serialize import _flatbuffer
from edgetorch.format import program as fbp
from edgetorch.format.flatbuffer import decode
from edgetorch.format.pte import load_pte

SCHEMA_DIR = Path(_flatbuffer.__file__).parent


def test_the_shipped_schema_files_are_rendered_from_the_format():
    for name, text in _flatbuffer._schema_texts().items():
        assert (SCHEMA_DIR / name).read_text(encoding="utf-8") == text, (
            f"{name} is stale: run python -m edgetorch.exir._serialize._flatbuffer"
        )


def test_prepare_schema_patches_the_marked_alignments(tmp_path):
    info = _flatbuffer._prepare_schema(str(tmp_path), constant_tensor_alignment=64, delegate_alignment=128)
    text = (tmp_path / "program.fbs").read_bytes()
    assert info.root_path == str(tmp_path / "program.fbs") and info.file_identifier == b"ET12"
    assert b"storage: [ubyte] (force_align: 64);" in text and b"data: [ubyte] (force_align: 128);" in text
    assert (info.max_alignment, info.tensor_alignment, info.delegate_alignment) == (128, 64, 128)
    with pytest.raises(ValueError, match="power of two"):
        _flatbuffer._prepare_schema(str(tmp_path), constant_tensor_alignment=12)


def test_flatc_reads_and_writes_our_programs_with_the_schema(tmp_path):
    """ExecuTorch's own flatc (shipped in its wheel) decodes a .pte of ours with the rendered schema, and the
    binary it encodes from that JSON decodes to the same Program."""
    spec = importlib.util.find_spec("executorch")  # located, not imported
    flatc = Path(list(spec.submodule_search_locations)[0]) / "data" / "bin" / "flatc" if spec else None
    if flatc is None or not flatc.exists():
        pytest.skip("this executorch wheel ships no flatc")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.linear(x)) * float("inf"), x.shape[0]

    buffer = to_edge(torch.export.export(Model(), (torch.randn(2, 4),))).to_executorch().buffer
    _flatbuffer._prepare_schema(str(tmp_path))
    (tmp_path / "model.json").write_bytes(_flatbuffer._program_flatbuffer_to_json(buffer))
    assert json.loads((tmp_path / "model.json").read_text())["execution_plan"][0]["name"] == "forward"
    subprocess.run(
        [str(flatc), "--binary", "-o", str(tmp_path / "out"), "program.fbs", "model.json"],
        cwd=tmp_path, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    rebuilt = decode((tmp_path / "out" / "model.pte").read_bytes(), fbp.Program)
    assert rebuilt == load_pte(buffer).program
