"""``edgetorch warmup``: the first run with an empty numba cache says it is compiling and counts what it
compiled; the second finds everything in the cache. Subprocesses, each with its own empty cache folder."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import policy, warm

pytestmark = pytest.mark.skipif(not policy.compiled_tier(), reason="the fast tier (numba) is not installed or is off")


class _Gelu(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x * 2)


def _warmup(path: str, cache: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "EDGETORCH_CACHE_DIR": cache + "-edgetorch"}
    return subprocess.run(
        [sys.executable, "-m", "edgetorch", "warmup", path], env=env, capture_output=True, text=True, check=True
    )


def test_warmup_compiles_once_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "gelu.pte"
    path.write_bytes(to_edge(torch.export.export(_Gelu(), (torch.randn(64, 256),))).to_executorch().buffer)
    cache = str(tmp_path / "numba-cache")
    first = _warmup(str(path), cache)
    assert "compiling the fast tier's kernels" in first.stderr
    assert "compiled " in first.stdout and " kernels in " in first.stdout
    # recorded as compiled here: a later first load compiles nothing in the background (runtime/warm.py)
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", cache + "-edgetorch")
    marker = warm.marker_dir() / f"{warm.program_key([path])}.json"
    assert json.loads(marker.read_text())["state"] == "done"
    second = _warmup(str(path), cache)
    assert "nothing to compile" in second.stdout
    assert "compiling" not in second.stderr
