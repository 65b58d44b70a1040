"""Allocation events: with ``track_allocations`` the ETDump names an allocator per planned memory id (and one for
unplanned tensors) and records what each method's load took; ExecuTorch's reader reads them, our Inspector lists
them."""

from __future__ import annotations

import io

import numpy as np
import torch

from edgetorch.devtools import Inspector
from edgetorch.exir import ExecutorchBackendConfig, to_edge
from edgetorch.exir.passes import MemoryPlanningPass
from edgetorch.runtime import Runtime
from edgetorch.runtime.etdump import ETDumpGen
from tests.devtools.models import mixed


def _traced(pte: bytes, inputs: list[np.ndarray], track: bool) -> bytes:
    tracer = ETDumpGen(track_allocations=track)
    method = Runtime.get().load_program(pte).load_method("forward", event_tracer=tracer)
    method.execute(inputs)
    return tracer.get_etdump_data()


def test_allocation_events_record_planned_arenas_and_unplanned_inputs():
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    model, args = mixed()
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))
    pte = to_edge(torch.export.export(model, args)).to_executorch(config).buffer
    sizes = Runtime.get().load_program(pte).metadata("forward").planned_buffer_sizes
    assert sizes and all(sizes)
    data = _traced(pte, [a.numpy() for a in args], track=True)

    default = deserialize_from_etdump_flatcc(data).run_data[0]  # ExecuTorch's reader: the load block
    names = [a.name for a in default.allocators]
    planned = [f"forward: planned memory id {i}" for i in range(1, len(sizes) + 1)]
    assert names == [*planned, "forward: method allocator"]
    events = [(e.allocation_event.allocator_id, e.allocation_event.allocation_size) for e in default.events
              if e.allocation_event is not None]  # fmt: skip
    assert events == [*((i, s) for i, s in enumerate(sizes, start=1)), (len(names), args[0].numel() * 4)]

    inspector = Inspector(etdump_data=data)
    (load,) = [b for b in inspector.event_blocks if b.name == "Default"]
    assert [(a.allocator, a.size) for a in load.allocations] == [(names[i - 1], s) for i, s in events]
    assert all(not b.allocations for b in inspector.event_blocks if b.name == "Execute")  # runs allocate nothing
    table = io.StringIO()
    inspector.print_data_tabular(table)
    assert "forward: planned memory id 1" in table.getvalue() and str(sizes[0]) in table.getvalue()


def test_cli_run_tracks_allocations(tmp_path):
    from edgetorch.cli import main

    model, args = mixed()
    (tmp_path / "m.pte").write_bytes(to_edge(torch.export.export(model, args)).to_executorch().buffer)
    etdump = tmp_path / "m.etdp"
    argv = ["run", str(tmp_path / "m.pte"), "--random", "--iterations", "1", "--etdump", str(etdump)]
    assert main([*argv, "--track-allocations"]) == 0
    frame = Inspector(etdump_path=etdump).allocations_to_dataframe()
    sizes = Runtime.get().load_program(tmp_path / "m.pte").metadata("forward").planned_buffer_sizes
    assert list(frame["allocation_size (bytes)"]) == list(sizes)  # inputs are planned here: no unplanned tensors


def test_no_allocation_events_unless_asked():
    from executorch.devtools import Inspector as ExecuTorchInspector

    model, args = mixed()
    pte = to_edge(torch.export.export(model, args)).to_executorch().buffer
    data = _traced(pte, [a.numpy() for a in args], track=False)
    assert not Inspector(etdump_data=data).allocations_to_dataframe().shape[0]
    # ExecuTorch 1.5.1's Inspector reads only ETDumps without allocation events: the default stays readable
    blocks = ExecuTorchInspector(etdump_data=data).event_blocks
    assert {"Default", "Execute"} <= {b.name for b in blocks}
