"""ExecuTorch's side of the delegated-ETRecord interop tests, in a fresh interpreter of its own.

``python -m tests.interop.etrecord_worker DIR`` runs the tasks listed in ``DIR/request.json`` with the real
``executorch`` package and writes ``DIR/answer.json`` (one answer per task) plus any files a task names:

* ``{"task": "parse", "etrecord": P, "inputs": N}``: ExecuTorch's ``parse_etrecord`` of P, as :func:`summary`
  gives it, and the parsed Edge program run eagerly (delegates run their original programs) on the arrays of
  the ``.npz`` N, its tensor outputs saved to ``P.outputs.npz``;
* ``{"task": "inspect", "etrecord": P, "etdump": D}``: ExecuTorch's Inspector on D and P, the Execute block's
  events as :func:`events` gives them;
* ``{"task": "export", "etrecord": P, "pte": Q}``: :class:`Partial` lowered by ExecuTorch with its
  XnnpackPartitioner in the nanoGPT guide's flow (a copy of the Edge manager, then ``to_executorch``,
  ``generate_etrecord``); the ``.pte`` to Q and the summary of the copy it recorded.

It does not run in the fork server: that one holds a stub of ``executorch.exir``, and these tasks need all of it.
Nothing here is imported by edgetorch; the tests import :func:`partial`, :func:`summary`, :func:`assert_same` and :func:`run_worker`.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

_ROOT = Path(__file__).resolve().parents[2]


class Partial(torch.nn.Module):
    """Two XNNPACK delegates (conv + relu + mean, linear) around ops XNNPACK leaves to portable kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.relu(self.conv(x)).mean((2, 3))
        return self.fc(torch.cumsum(y, 1)), y.sum(1, keepdim=True)


def partial() -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    return Partial().eval(), (torch.randn(1, 3, 8, 8),)


def summary(program: torch.export.ExportedProgram) -> dict:
    """What an ETRecord must keep of a delegated Edge program: each operator node's target and debug handle
    (``getitem`` nodes left out: readers differ in the handles they give them; a delegate call keyed by its
    lowered module), and each lowered module's
    backend, blob digest, compile specs, named data keys and original program, summarized the same way."""

    def handle(node: torch.fx.Node):
        found = node.meta.get("debug_handle")
        return list(found) if isinstance(found, (tuple, list)) else found

    def key(node: torch.fx.Node) -> str:  # ExecuTorch's reader renames delegate calls, not their modules
        return f"call {node.args[0].target}" if node.target.__name__ == "executorch_call_delegate" else node.name

    nodes = {
        key(n): [n.target.__name__, handle(n)]
        for n in program.graph.nodes
        if n.op == "call_function" and n.target.__name__ != "getitem"
    }
    delegates = {}
    for n in program.graph.nodes:
        if n.op == "get_attr" and hasattr(getattr(program.graph_module, n.target), "backend_id"):
            lowered = getattr(program.graph_module, n.target)
            store = lowered.named_data_store_output
            delegates[n.target] = {
                "backend_id": lowered.backend_id,
                "processed_bytes": hashlib.sha256(lowered.processed_bytes).hexdigest(),
                "compile_specs": [[s.key, bytes(s.value).hex()] for s in lowered.compile_specs],
                "named_data": None if store is None else sorted(store.pte_data),
                "named_buffers": None if store is None else [hashlib.sha256(b).hexdigest() for b in store.buffers],
                "original_module": summary(lowered.original_module),
            }
    return {"nodes": nodes, "delegates": delegates}


def assert_same(got: dict, want: dict) -> None:
    """Two summaries agree on every node ``want`` has (ExecuTorch's reader adds getitems for unused outputs),
    at the top and inside each delegate, and on each delegate's backend, blob, specs and named data."""
    differ = {
        name: (got["nodes"].get(name), node) for name, node in want["nodes"].items() if got["nodes"].get(name) != node
    }
    assert not differ, f"nodes that differ, (got, want): {dict(list(differ.items())[:8])}"
    assert got["delegates"].keys() == want["delegates"].keys()
    for name, delegate in want["delegates"].items():
        inner = dict(got["delegates"][name])
        assert_same(inner.pop("original_module"), delegate["original_module"])
        assert inner == {k: v for k, v in delegate.items() if k != "original_module"}, name


def events(inspector) -> list[dict]:
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    return [
        {
            "name": e.name,
            "delegate_backend_name": e.delegate_backend_name,
            "is_delegated_op": bool(e.is_delegated_op),
            "op_types": list(e.op_types),
            "debug_handles": e.debug_handles
            if isinstance(e.debug_handles, (int, type(None)))
            else list(e.debug_handles),
            "stack_traces": sorted(e.stack_traces.values()) if e.stack_traces else [],
        }
        for e in block.events
    ]


def _parse(task: dict) -> dict:
    from executorch.devtools import parse_etrecord

    record = parse_etrecord(task["etrecord"])
    program = record.edge_dialect_program
    with np.load(task["inputs"]) as arrays:
        inputs = [torch.from_numpy(arrays[k]) for k in sorted(arrays, key=lambda k: int(k.split("_")[1]))]
    with torch.no_grad():
        outputs = program.module()(*inputs)
    tensors = [o.numpy() for o in torch.utils._pytree.tree_leaves(outputs) if isinstance(o, torch.Tensor)]
    np.savez(task["etrecord"] + ".outputs.npz", *tensors)
    return summary(program)


def _inspect(task: dict) -> list[dict]:
    from executorch.devtools import Inspector

    return events(Inspector(etdump_path=task["etdump"], etrecord=task["etrecord"]))


def _export(task: dict) -> dict:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools import generate_etrecord
    from executorch.exir import to_edge_transform_and_lower

    model, args = partial()
    edge_manager = to_edge_transform_and_lower(torch.export.export(model, args), partitioner=[XnnpackPartitioner()])
    edge_manager_copy = copy.deepcopy(edge_manager)
    et_program = edge_manager.to_executorch()
    generate_etrecord(task["etrecord"], edge_manager_copy, et_program)
    Path(task["pte"]).write_bytes(et_program.buffer)
    return summary(edge_manager_copy.exported_program())


def main(folder: str) -> None:
    warnings.simplefilter("ignore")
    root = Path(folder)
    tasks = {"parse": _parse, "inspect": _inspect, "export": _export}
    answers = [tasks[task["task"]](task) for task in json.loads((root / "request.json").read_text())]
    (root / "answer.json").write_text(json.dumps(answers))


def run_worker(folder: Path, tasks: list[dict], timeout: float = 600) -> list:
    """Run ``tasks`` in a fresh interpreter with ExecuTorch; their answers (a failure fails the calling test)."""
    (folder / "request.json").write_text(json.dumps(tasks))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(_ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "tests.interop.etrecord_worker", str(folder)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=_ROOT, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"ExecuTorch's ETRecord worker failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads((folder / "answer.json").read_text())


if __name__ == "__main__":
    main(sys.argv[1])
