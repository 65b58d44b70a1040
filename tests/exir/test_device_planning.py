"""Device delegates: a partitioner's ``target_device`` places its delegate's tensors on that device.

``PropagateDevicePass`` marks the specs (and, with ``enable_non_cpu_memory_planning``, inserts the host/device
copies and plans device arenas); the emitter writes each device tensor's device and the plan's device
arenas; our runtime, which allocates host memory only, refuses a method with a device arena by name and runs
the rest of the program.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.fx.passes.operator_support import OperatorSupportBase

import edgetorch.backends.demo.compiler  # noqa: F401  (registers BackendWithCompilerDemo)
from edgetorch.errors import ProgramLoadError
from edgetorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
from edgetorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
from edgetorch.exir.backend.compile_spec_schema import CompileSpec
from edgetorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from edgetorch.exir.dialects._ops import ops as exir_ops
from edgetorch.exir.passes.propagate_device_pass import (
    TARGET_DEVICE_COMPILE_SPEC_KEY,
    PropagateDeviceConfig,
    PropagateDevicePass,
    parse_device,
)
from edgetorch.format.program import DeviceType
from edgetorch.runtime import Runtime


class _Adds(OperatorSupportBase):
    def is_node_supported(self, submodules, node) -> bool:
        return node.op == "call_function" and node.target == exir_ops.edge.aten.add.Tensor


class AddsOnDevice(Partitioner):
    """Delegates every add to the demo backend, on ``device`` (None: a host delegate)."""

    def __init__(self, device: str | None = "cuda:0") -> None:
        super().__init__()
        specs = [CompileSpec("max_value", bytes([4]))]
        if device is not None:
            specs.append(CompileSpec(TARGET_DEVICE_COMPILE_SPEC_KEY, device.encode()))
        self.delegation = DelegationSpec("BackendWithCompilerDemo", specs)

    def partition(self, exported_program) -> PartitionResult:
        tags = {}
        for part in generate_pattern_op_partitions(exported_program.graph_module, op_support=_Adds()):
            for node in part.nodes:
                node.meta["delegation_tag"] = tag = f"tag{part.id}"
                tags[tag] = self.delegation
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


class AddThenScale(torch.nn.Module):
    def forward(self, x, y):
        return (x + y) * 2.0


ARGS = (torch.ones(2, 2), torch.full((2, 2), 3.0))


def _lower(device: str | None = "cuda:0", **config):
    ep = torch.export.export(AddThenScale(), ARGS)
    return to_edge_transform_and_lower(ep, partitioner=[AddsOnDevice(device)]).to_executorch(
        ExecutorchBackendConfig(**config)
    )


def _plan(program):
    return program.executorch_program.execution_plan[0]


def _devices(plan) -> set:
    found = set()
    for ev in plan.values:
        info = getattr(ev.val, "extra_tensor_info", None)
        if info is not None and info.device_type != DeviceType.CPU:
            found.add((info.device_type, info.device_index))
    return found


def test_parse_device():
    assert parse_device(b"cuda:1") == (DeviceType.CUDA, 1)
    assert parse_device("CUDA") == (DeviceType.CUDA, 0)
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        parse_device(b"tpu:0")
    with pytest.raises(ValueError, match="not a non-negative integer"):
        parse_device(b"cuda:x")


def test_skipping_copies_needs_device_planning():
    with pytest.raises(ValueError, match="enable_non_cpu_memory_planning"):
        PropagateDevicePass(skip_h2d_for_method_inputs=True)
    assert PropagateDeviceConfig(skip_h2d_for_method_inputs={"forward": True}).for_method("forward") == (True, False)
    assert PropagateDeviceConfig(skip_h2d_for_method_inputs={"forward": True}).for_method("other") == (False, False)


def test_marked_without_device_planning_and_runs_on_host_memory():
    program = _lower()
    plan = _plan(program)
    assert _devices(plan) == {(DeviceType.CUDA, 0)}  # the delegate's inputs and output say where they live
    assert plan.non_const_buffer_device is None and len(plan.non_const_buffer_sizes) == 2
    got = Runtime.get().load_program(program.buffer).load_method("forward").execute([a.numpy() for a in ARGS])
    np.testing.assert_array_equal(got[0], AddThenScale()(*ARGS).numpy())


def test_a_host_delegate_stays_on_the_host():
    plan = _plan(_lower(device=None, enable_non_cpu_memory_planning=True))
    assert _devices(plan) == set() and plan.non_const_buffer_device is None


def test_device_planning_copies_and_plans_a_device_arena():
    program = _lower(enable_non_cpu_memory_planning=True)
    plan = _plan(program)
    ops = [op.name for op in plan.operators]
    assert "et_copy::_h2d_copy" in ops and "et_copy::_d2h_copy" in ops
    [entry] = plan.non_const_buffer_device
    assert (entry.device_type, entry.device_index) == (DeviceType.CUDA, 0)
    assert entry.buffer_idx == len(plan.non_const_buffer_sizes) - 1 and plan.non_const_buffer_sizes[-1] > 0
    with pytest.raises(ProgramLoadError, match="buffer 2 on device CUDA:0; this runtime allocates host"):
        Runtime.get().load_program(program.buffer).load_method("forward")


def test_skipped_input_copies_hand_the_inputs_to_the_device():
    program = _lower(
        enable_non_cpu_memory_planning=True,
        propagate_device_config=PropagateDeviceConfig(skip_h2d_for_method_inputs=True),
    )
    plan = _plan(program)
    assert "et_copy::_h2d_copy" not in [op.name for op in plan.operators]
    inputs = [plan.values[i].val for i in plan.inputs]
    assert all(t.extra_tensor_info.device_type == DeviceType.CUDA for t in inputs)


def test_other_methods_of_the_program_still_load():
    from edgetorch.exir import to_edge

    eps = {name: torch.export.export(AddThenScale(), ARGS) for name in ("host", "device")}
    edge = to_edge(eps).to_backend({"device": AddsOnDevice()})
    program = Runtime.get().load_program(
        edge.to_executorch(ExecutorchBackendConfig(enable_non_cpu_memory_planning=True)).buffer
    )
    got = program.load_method("host").execute([a.numpy() for a in ARGS])
    np.testing.assert_array_equal(got[0], AddThenScale()(*ARGS).numpy())
    with pytest.raises(ProgramLoadError, match="on device CUDA:0"):
        program.load_method("device")


def test_a_device_entry_for_a_missing_buffer_is_refused_typed():
    from edgetorch.format import program as fbp
    from edgetorch.format.pte import load_pte, save_pte
    from edgetorch.runtime.program import Verification

    buffer = _lower(device=None).buffer
    pte = load_pte(buffer)
    segments = [bytes(pte.segment(i)) for i in range(len(pte.program.segments))]
    program = load_pte(buffer).program
    program.execution_plan[0].non_const_buffer_device = [fbp.NonConstBufferDevice(9, fbp.DeviceType.CUDA, 0)]
    damaged = save_pte(program, segments)
    with pytest.raises(ProgramLoadError, match="names planned buffer 9"):
        Runtime.get().load_program(damaged, Verification.InternalConsistency)
    with pytest.raises(ProgramLoadError, match="buffer 9 on device CUDA:0"):
        Runtime.get().load_program(damaged, Verification.Minimal).load_method("forward")
