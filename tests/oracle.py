"""Test helpers: the real ExecuTorch as the format oracle, PyTorch eager as the numerical oracle."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from edgetorch.exir.passes.decompose import trimmed_decompositions

_ROOT = Path(__file__).resolve().parent.parent


def executorch_pte(
    model: torch.nn.Module, args: tuple, dynamic_shapes: Any = None, xnnpack: bool = False, **kw
) -> bytes:
    """Lower ``model`` with the real ExecuTorch 1.5.1 and return the .pte bytes, under
    ``trimmed_decompositions`` (edgetorch.exir.passes.decompose): torch's fixed costs of a decomposition
    trimmed, which changes no result."""
    from executorch.exir import to_edge, to_edge_transform_and_lower

    ep = torch.export.export(model.eval(), args, dynamic_shapes=dynamic_shapes, strict=False)
    with trimmed_decompositions():
        if xnnpack:
            from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

            return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch().buffer
        return to_edge(ep, **kw).to_executorch().buffer


class ExecuTorchCrashed(AssertionError):
    """ExecuTorch's runtime died (signal or abort) or failed on a program, in its own process."""


def run_executorch_calls(
    pte: bytes,
    calls: list[list],
    method: str = "forward",
    timeout: float = 300,
    data: bytes | None = None,
    llama_ops: bool = False,
) -> list[list]:
    """Run ``method`` of a .pte on the real ExecuTorch runtime, once per entry of ``calls``, in a subprocess.

    The method is loaded once, so mutable buffers carry state from one call to the next. ``data`` is a
    .ptd file the program needs (ExecuTorch's ``data_path``); ``llama_ops`` loads ExecuTorch's LLM custom-ops
    library (``llama::*`` kernels) in the worker. A crash of ExecuTorch's runtime becomes an
    ``ExecuTorchCrashed`` failure of the calling test, never a dead suite.
    """
    with tempfile.TemporaryDirectory(prefix="et-worker-") as folder:
        root = Path(folder)
        root.joinpath("model.pte").write_bytes(bytes(pte))
        if data is not None:
            root.joinpath("model.ptd").write_bytes(bytes(data))
        arrays, request = {}, []
        for i, call in enumerate(calls):
            specs = []
            for j, x in enumerate(call):
                if isinstance(x, torch.Tensor):
                    x = x.detach().numpy()
                if isinstance(x, np.ndarray | np.generic):
                    arrays[f"c{i}_{j}"] = np.asarray(x)
                    specs.append({"kind": "array", "key": f"c{i}_{j}"})
                else:
                    specs.append({"kind": "scalar", "value": x})
            request.append(specs)
        np.savez(root / "inputs.npz", **arrays)
        payload = {"method": method, "calls": request, "data": data is not None, "llama_ops": llama_ops}
        root.joinpath("request.json").write_text(json.dumps(payload))
        run_worker("tests.executorch_worker", root, method, timeout)
        described = json.loads(root.joinpath("outputs.json").read_text())
        results = []
        for i, kinds in enumerate(described):
            with np.load(root / f"outputs_{i}.npz", allow_pickle=False) as saved:
                results.append([saved[k["key"]] if k["kind"] == "array" else k["value"] for k in kinds])
        return results


def run_executorch_training(
    pte: bytes, steps: list[list], sgd: dict, method: str = "forward", timeout: float = 600
) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Train a joint-graph .pte with ExecuTorch's TrainingModule and SGD (in a subprocess), one step per entry
    of ``steps`` (each the method's inputs); ``sgd`` holds lr, momentum, dampening, weight_decay, nesterov.

    Returns each step's loss (before its update), the final parameters and the last step's gradients.
    """
    with tempfile.TemporaryDirectory(prefix="et-training-") as folder:
        root = Path(folder)
        root.joinpath("model.pte").write_bytes(bytes(pte))
        arrays = {f"s{i}_{j}": np.asarray(x) for i, step in enumerate(steps) for j, x in enumerate(step)}
        np.savez(root / "inputs.npz", **arrays)
        keys = [[f"s{i}_{j}" for j in range(len(step))] for i, step in enumerate(steps)]
        root.joinpath("request.json").write_text(json.dumps({"method": method, "sgd": sgd, "steps": keys}))
        run_worker("tests.executorch_training_worker", root, f"training {method}", timeout)
        with np.load(root / "losses.npz") as losses, np.load(root / "parameters.npz") as params:
            with np.load(root / "gradients.npz") as grads:
                return losses["losses"], dict(params), dict(grads)


def _worker_env() -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))


class _ForkServer:
    """One ``tests.executorch_forkserver`` process per test process, started on first use: it has imported
    torch and ExecuTorch's runtime once and forks a fresh child for each program."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.executorch_forkserver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_ROOT,
            env=_worker_env(),
        )
        self._pending = b""
        atexit.register(self.close)
        if self._line(120) != "ready":
            self.close()
            raise ExecuTorchCrashed("the ExecuTorch fork server did not start")

    def _line(self, timeout: float) -> str:
        """The server's next line. Read from the raw descriptor into our own buffer: a buffered reader could take
        two lines in one read and leave ``select`` waiting on an empty pipe for a line it already holds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                raise subprocess.TimeoutExpired("tests.executorch_forkserver", timeout)
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                raise ExecuTorchCrashed("the ExecuTorch fork server exited")
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode().strip()

    def run(self, module: str, folder: Path, timeout: float) -> int:
        """Run worker ``module`` on ``folder`` in a forked child; its exit code (negative: signal)."""
        self.proc.stdin.write(f"{module} {folder}\n".encode())
        self.proc.stdin.flush()
        pid = int(self._line(60).split()[1])
        try:
            return int(self._line(timeout).split()[1])
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._line(60)
            raise

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(30)


_SERVER: _ForkServer | None = None


def _fork_run(module: str, folder: Path, timeout: float) -> tuple[int, str]:
    global _SERVER
    if _SERVER is None or not _SERVER.alive():
        _SERVER = _ForkServer()
    try:
        code = _SERVER.run(module, folder, timeout)
    except BaseException:
        # The server's state is unknown after a timeout or a broken line: the next program gets a fresh one.
        _SERVER.proc.kill()
        _SERVER = None
        raise
    log = folder / "worker.log"
    return code, log.read_text(errors="replace") if log.exists() else ""


def run_worker(module: str, folder: Path, what: str, timeout: float = 300) -> None:
    """Run ``python -m module folder`` (a worker that uses the real ExecuTorch) in a process of its own; its
    failure or crash becomes an ``ExecuTorchCrashed`` failure of the calling test.

    The worker is a child forked from a server that has already imported torch and ExecuTorch's runtime
    (``tests/executorch_forkserver.py``); ``EDGETORCH_TEST_FORK=0``, or a platform without ``fork``, starts a
    fresh interpreter instead.
    """
    if hasattr(os, "fork") and os.environ.get("EDGETORCH_TEST_FORK") != "0":
        code, log = _fork_run(module, folder, timeout)
    else:
        proc = subprocess.run(
            [sys.executable, "-m", module, str(folder)],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=_ROOT,
            env=_worker_env(),
        )
        code, log = proc.returncode, proc.stderr
    if code != 0:
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
        raise ExecuTorchCrashed(f"ExecuTorch's runtime failed ({how}) on {what}:\n{log[-3000:]}")


def run_executorch(pte: bytes, inputs: list, method: str = "forward", data: bytes | None = None) -> list:
    """Run a .pte (with its .ptd ``data``, if any) once on the real ExecuTorch runtime, in a subprocess."""
    return run_executorch_calls(pte, [inputs], method, data=data)[0]


def eager(model: torch.nn.Module, args: tuple) -> list:
    """Eager outputs flattened to a list of NumPy arrays / scalars."""
    with torch.no_grad():
        out = model(*args)
    flat = torch.utils._pytree.tree_leaves(out)
    return [o.detach().numpy() if isinstance(o, torch.Tensor) else o for o in flat]


def assert_close(got: list, want: list, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    assert len(got) == len(want), f"{len(got)} outputs, expected {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, expected {w.shape}"
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(
                g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, err_msg=f"output {i}"
            )
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
