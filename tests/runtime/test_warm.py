"""The first run of a program whose fast-tier kernels are not compiled on this machine (runtime/warm.py): it runs
on the NumPy tier while a background process compiles them, and the processes after it run compiled. End to end
in subprocesses with their own empty numba and edgetorch caches; the states of the marker and the lock
in-process, with the background process replaced by a recorder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from edgetorch.exir import to_edge
from edgetorch.runtime import Runtime, policy, warm

pytestmark = pytest.mark.skipif(not policy.compiled_tier(), reason="the fast tier (numba) is not installed or is off")


class _Gelu(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.gelu(x * 2)


@pytest.fixture
def gelu_pte(tmp_path):
    path = tmp_path / "gelu.pte"
    path.write_bytes(to_edge(torch.export.export(_Gelu(), (torch.randn(64, 256),))).to_executorch().buffer)
    return path


# A fresh process: loads the program, says whether the compiled tier is on, saves the output.
_RUN = """
import sys
import numpy as np
from edgetorch.runtime import Runtime, policy
method = Runtime.get().load_program(sys.argv[1]).load_method("forward")
x = np.linspace(-3, 3, 64 * 256, dtype=np.float32).reshape(64, 256)
np.save(sys.argv[2], method.execute([x])[0])
print("numba imported:", "numba" in sys.modules)
print("compiled tier:", policy.compiled_tier())
"""


def _run(pte: Path, out: Path, caches: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "EDGETORCH_COMPILE"}
    env.update(NUMBA_CACHE_DIR=str(caches / "numba"), EDGETORCH_CACHE_DIR=str(caches / "edgetorch"))
    return subprocess.run(
        [sys.executable, "-c", _RUN, str(pte), str(out)], env=env, capture_output=True, text=True, timeout=300
    )


def _marker(caches: Path, seconds: float) -> dict:
    """The background compile's marker, once it is written (within ``seconds``)."""
    folder = caches / "edgetorch" / "compiled"
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        markers = list(folder.glob("*.json"))
        if markers and not list(folder.glob("*.lock")):
            return json.loads(markers[0].read_text())
        time.sleep(0.2)
    logs = "\n".join(log.read_text() for log in folder.glob("*.log"))
    raise AssertionError(f"no marker after {seconds} s; the background compile's log:\n{logs}")


def test_first_process_runs_numpy_while_kernels_compile_then_the_next_runs_compiled(gelu_pte, tmp_path):
    caches = tmp_path / "caches"
    first = _run(gelu_pte, tmp_path / "first.npy", caches)
    assert first.returncode == 0, first.stderr
    assert "compiled tier: False" in first.stdout and "numba imported: False" in first.stdout
    assert "compiling in the background" in first.stderr and "EDGETORCH_COMPILE=wait" in first.stderr
    assert _marker(caches, 240)["state"] == "done"

    second = _run(gelu_pte, tmp_path / "second.npy", caches)
    assert second.returncode == 0, second.stderr
    assert "compiled tier: True" in second.stdout
    assert "edgetorch:" not in second.stderr  # neither the background notice nor a compile
    x = torch.from_numpy(np.linspace(-3, 3, 64 * 256, dtype=np.float32).reshape(64, 256))
    expected = _Gelu()(x)
    for name in ("first.npy", "second.npy"):
        np.testing.assert_allclose(np.load(tmp_path / name), expected.numpy(), rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------------------ in-process


@pytest.fixture
def background(monkeypatch, tmp_path):
    """The background start in force with its own cache directory, ``spawned`` recording the processes it would
    start (none is)."""
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(warm, "_told", False)
    spawned: list[list[Path]] = []

    def spawn(files, key, where):
        spawned.append(list(files))
        return os.getpid()

    monkeypatch.setattr(warm, "_spawn", spawn)
    with policy.using(compiled=True, compile_in_background=True):
        yield spawned


def _paths(where: Path, pte: Path) -> tuple[Path, Path]:
    key = warm.program_key([pte])
    return where / f"{key}.json", where / f"{key}.lock"


def test_a_cold_program_starts_one_compile_and_turns_the_tier_off(background, gelu_pte, capsys):
    Runtime.get().load_program(str(gelu_pte))
    assert background == [[gelu_pte]]
    assert not policy.compiled_tier()
    marker, lock = _paths(warm.marker_dir(), gelu_pte)
    assert lock.read_text() == str(os.getpid()) and not marker.exists()
    assert "compiling in the background" in capsys.readouterr().err


def test_a_compile_under_way_is_joined_not_started_again(background, gelu_pte):
    _, lock = _paths(warm.marker_dir(), gelu_pte)
    lock.write_text(str(os.getpid()))  # a live process holds it
    Runtime.get().load_program(str(gelu_pte))
    assert background == []
    assert not policy.compiled_tier()


@pytest.mark.parametrize("state", ["done", "failed"])
def test_a_marked_program_keeps_the_tier_on(background, gelu_pte, state):
    marker, _ = _paths(warm.marker_dir(), gelu_pte)
    marker.write_text(json.dumps({"state": state}))
    Runtime.get().load_program(str(gelu_pte))
    assert background == []
    assert policy.compiled_tier()


def test_a_dead_compile_is_recorded_as_failed_and_the_tier_stays_on(background, gelu_pte):
    marker, lock = _paths(warm.marker_dir(), gelu_pte)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(str(dead.pid))
    Runtime.get().load_program(str(gelu_pte))
    assert background == []
    assert policy.compiled_tier()
    assert json.loads(marker.read_text())["state"] == "failed" and not lock.exists()


def test_a_changed_program_is_a_new_key(background, gelu_pte):
    before = warm.program_key([gelu_pte])
    os.utime(gelu_pte, ns=(0, gelu_pte.stat().st_mtime_ns + 1_000_000_000))
    assert warm.program_key([gelu_pte]) != before


def test_bytes_and_wait_compile_in_place(background, gelu_pte, monkeypatch):
    Runtime.get().load_program(gelu_pte.read_bytes())
    with policy.using(compile_in_background=False):
        Runtime.get().load_program(str(gelu_pte))
        assert policy.compiled_tier()
    assert background == []
    monkeypatch.setenv("EDGETORCH_COMPILE", "wait")
    code = "from edgetorch.runtime import policy; print(policy.current().compile_in_background)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_the_compile_process_records_a_failure_and_frees_the_lock(background, tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"not a program")
    where = warm.marker_dir()
    (where / "k.lock").write_text(str(os.getpid()))
    assert warm.main(Runtime.get(), ["--key", "k", str(bad)]) == 1
    assert json.loads((where / "k.json").read_text())["state"] == "failed"
    assert not (where / "k.lock").exists()


def test_an_unwritable_cache_directory_compiles_in_place(background, gelu_pte, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", str(blocker / "edgetorch"))  # under a file: no directory can be made
    Runtime.get().load_program(str(gelu_pte))
    assert background == []
    assert policy.compiled_tier()
