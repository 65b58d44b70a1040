"""Builds that more than one test file needs, made once per test run even when pytest-xdist spreads those files
over workers: the first worker to ask builds into a folder under the run's shared temporary root, holding a file
lock; the others wait on the lock and read the files. A build that fails leaves no folder marked done, so the
next asker builds again (and fails in its own test)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` after ``build(folder)`` has filled it, once per test run."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: .../pytest-N/popen-gwK
    folder = root / f"shared-{name}"
    with FileLock(str(root / f"shared-{name}.lock")):
        if not (folder / "done").exists():
            folder.mkdir(exist_ok=True)
            build(folder)
            (folder / "done").touch()
    return folder


def _output_step(ep) -> float:
    """The scale of the program's last per-tensor dequantize: one quantization step of the logits."""
    scales = [
        n.args[1]
        for n in ep.graph.nodes
        if n.op == "call_function" and "dequantize_per_tensor" in str(n.target) and isinstance(n.args[1], float)
    ]
    assert scales, "the int8 program has no per-tensor dequantize"
    return scales[-1]


def _build_lite0(folder: Path) -> None:
    import numpy as np
    import torch

    from bench.models import example_module
    from edgetorch.exir import to_edge

    lite0, lower = example_module("vision", "lite0"), example_module("vision", "export_vision").lower
    model = lite0.efficientnet_lite0()
    photos = list(example_module("vision", "photos").inputs().values())
    with torch.no_grad():
        np.save(folder / "eager.npy", np.concatenate([model(torch.from_numpy(x)).numpy() for x in photos]))
    example = (torch.from_numpy(photos[0]),)
    portable = to_edge(torch.export.export(model, example)).to_executorch().buffer
    folder.joinpath("portable.pte").write_bytes(portable)
    folder.joinpath("xnnpack.pte").write_bytes(lower(torch.export.export(model, example)))
    quantized = lite0.quantize_int8(model, photos)
    torch.export.save(quantized, folder / "int8.pt2")
    folder.joinpath("int8.pte").write_bytes(lower(quantized))
    folder.joinpath("int8.json").write_text(json.dumps({"output_step": _output_step(quantized)}))


def lite0_programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """EfficientNet-Lite0 with its ImageNet weights (examples/vision), lowered by edgetorch (XNNPACK: by the
    example's own ``export_vision.lower``):
    ``portable.pte`` and ``xnnpack.pte`` (fp32), ``int8.pte`` (static per-channel int8, calibrated on the
    example's photos, XNNPACK) and its ``int8.pt2`` export; eager's logits on the photos (``eager.npy``) and one
    quantization step of the int8 program's logits (``int8.json``)."""
    return built_once(tmp_path_factory, "efficientnet_lite0", _build_lite0)
