"""ETRecords of XNNPACK-delegated programs, both ways: ours read by ExecuTorch's parse_etrecord and Inspector, theirs
by ours.

The ETRecord is made as the nanoGPT guide says: a copy of the Edge manager after ``to_edge_transform_and_lower``
(its graph holds ``executorch_call_delegate`` calls on lowered modules), then ``to_executorch`` and
``generate_etrecord``. A lowered module must come back whole (backend, blob, compile specs, named data, the
program it was lowered from, debug handles inside and out) and the Edge program must still run eagerly, each
delegate through its original program. ExecuTorch runs in one fresh interpreter per module
(tests/interop/etrecord_worker.py).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from edgetorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from edgetorch.devtools import Inspector, generate_etrecord, parse_etrecord
from edgetorch.exir import to_edge_transform_and_lower
from edgetorch.runtime import Runtime
from tests.interop.etrecord_worker import assert_same, partial, run_worker, summary


def _etdump(pte: bytes, args: tuple, path) -> None:
    program = Runtime.get().load_program(pte, enable_etdump=True)
    program.load_method("forward").execute([a.numpy() for a in args])
    program.write_etdump_result_to_file(path)


@pytest.fixture(scope="module")
def exchange(tmp_path_factory):
    """Our guide-flow ETRecord and ETDump, ExecuTorch's ETRecord of the same model, and the worker's answers."""
    tmp = tmp_path_factory.mktemp("delegated")
    model, args = partial()
    edge_manager = to_edge_transform_and_lower(torch.export.export(model, args), partitioner=[XnnpackPartitioner()])
    edge_manager_copy = copy.deepcopy(edge_manager)
    et_program = edge_manager.to_executorch()
    generate_etrecord(tmp / "ours.bin", edge_manager_copy, et_program)
    _etdump(et_program.buffer, args, tmp / "ours.etdp")
    np.savez(tmp / "inputs.npz", *[a.numpy() for a in args])
    parsed, inspected, theirs = run_worker(
        tmp,
        [
            {"task": "parse", "etrecord": str(tmp / "ours.bin"), "inputs": str(tmp / "inputs.npz")},
            {"task": "inspect", "etrecord": str(tmp / "ours.bin"), "etdump": str(tmp / "ours.etdp")},
            {"task": "export", "etrecord": str(tmp / "theirs.bin"), "pte": str(tmp / "theirs.pte")},
        ],
    )
    with np.load(tmp / "ours.bin.outputs.npz") as outputs:
        eager_outputs = [outputs[f"arr_{i}"] for i in range(len(outputs))]
    return {
        "model": model,
        "args": args,
        "tmp": tmp,
        "ours": summary(edge_manager_copy.exported_program()),
        "executorch_parsed_ours": parsed,
        "executorch_eager_outputs": eager_outputs,
        "executorch_inspected_ours": inspected,
        "theirs": theirs,
    }


def test_our_delegated_etrecord_round_trips(exchange):
    record = parse_etrecord(exchange["tmp"] / "ours.bin")
    assert len(exchange["ours"]["delegates"]) == 2  # the model keeps cumsum and sum outside XNNPACK
    assert summary(record.edge_dialect_program) == exchange["ours"]
    with torch.no_grad():
        got = record.edge_dialect_program.module()(*exchange["args"])
        torch.testing.assert_close(got, exchange["model"](*exchange["args"]))


def test_executorch_parses_our_delegated_etrecord(exchange):
    assert_same(exchange["executorch_parsed_ours"], exchange["ours"])
    with torch.no_grad():
        want = [t.numpy() for t in exchange["model"](*exchange["args"])]
    for got, expected in zip(exchange["executorch_eager_outputs"], want, strict=True):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_executorch_inspector_reads_our_delegated_etrecord_and_etdump(exchange):
    events = exchange["executorch_inspected_ours"]
    assert any(e["delegate_backend_name"] == "XnnpackBackend" for e in events)
    (cumsum,) = [e for e in events if e["name"] == "native_call_cumsum.out"]
    assert cumsum["op_types"] == ["aten.cumsum.default"]
    assert any("etrecord_worker.py" in trace for trace in cumsum["stack_traces"])  # where Partial.forward is


def test_our_parse_reads_executorch_delegated_etrecord(exchange):
    tmp = exchange["tmp"]
    record = parse_etrecord(tmp / "theirs.bin")
    assert_same(summary(record.edge_dialect_program), exchange["theirs"])
    assert {d["backend_id"] for d in exchange["theirs"]["delegates"].values()} == {"XnnpackBackend"}
    with torch.no_grad():
        got = record.edge_dialect_program.module()(*exchange["args"])
        torch.testing.assert_close(got, exchange["model"](*exchange["args"]))
    # Their program run by our runtime, its ETDump joined with their ETRecord by our Inspector.
    _etdump((tmp / "theirs.pte").read_bytes(), exchange["args"], tmp / "theirs.etdp")
    inspector = Inspector(etdump_path=str(tmp / "theirs.etdp"), etrecord=str(tmp / "theirs.bin"))
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]
    (cumsum,) = [e for e in block.events if e.name == "native_call_cumsum.out"]
    assert cumsum.op_types == ["aten.cumsum.default"]
    assert any(e.delegate_backend_name == "XnnpackBackend" for e in block.events)
