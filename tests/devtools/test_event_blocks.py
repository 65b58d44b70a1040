"""How the Inspector turns an ETDump into event blocks (ExecuTorch's signatures, merging of runs, logged values,
debug handles through the delegate map), on hand-made ETDumps, and the eager side of the numeric gap."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.devtools.inspector import Event, EventBlock, Inspector, PerfData
from edgetorch.devtools.inspector._inspector import (
    EventSignature,
    InstructionEvent,
    InstructionEventSignature,
    ProfileEventSignature,
)
from edgetorch.devtools.inspector._inspector_utils import DebugDataMismatchError
from edgetorch.devtools.inspector._intermediate_output_capturer import IntermediateOutputCapturer
from edgetorch.exir import to_edge
from edgetorch.format import etdump as fe
from edgetorch.format.program import ScalarType


def _profile(name, instruction, start, end, delegate=None, metadata=None):
    return fe.Event(
        profile_event=fe.ProfileEvent(
            name=name,
            chain_index=0,
            instruction_id=instruction,
            delegate_debug_id_int=delegate if isinstance(delegate, int) else -1,
            delegate_debug_id_str=delegate if isinstance(delegate, str) else "",
            delegate_debug_metadata=metadata,
            start_time=start,
            end_time=end,
        )
    )


def _logged(instruction, offset, sizes=(2,), output=False, name="value"):
    tensor = fe.Tensor(scalar_type=ScalarType.FLOAT, sizes=list(sizes), strides=[1], offset=offset)
    value = fe.Value(val=fe.ValueType.Tensor, tensor=tensor, output=fe.Bool(output) if output else None)
    return fe.Event(debug_event=fe.DebugEvent(name=name, chain_index=0, instruction_id=instruction, debug_entry=value))


def _run(events, name="Execute"):
    return fe.RunData(name=name, bundled_input_index=-1, events=events)


def test_identical_runs_merge_and_each_event_gets_one_sample_per_run():
    runs = [
        _run(
            [
                _profile("add", 0, 0, 2000 * k),
                _logged(0, 0, name="add"),
                _profile("DELEGATE_CALL", 1, 0, 10),
                _logged(1, 8, output=True),
            ]
        )
        for k in (1, 2)
    ]
    buffer = np.array([1, 2, 3, 4], np.float32).tobytes()
    (block,) = EventBlock._gen_from_etdump(fe.ETDump(run_data=runs), output_buffer=buffer)
    add, call = block.events
    assert add.name == "add" and add.perf_data == PerfData([0.002, 0.004]) and add._start_time == [0, 0]
    assert add.debug_data[0].tolist() == [1.0, 2.0] and not call.debug_data
    assert [t.tolist() for t in block.run_output] == [[3.0, 4.0]] and block.bundled_input_index == -1
    other = _run([_profile("mul", 0, 0, 1)])  # different events: a block of its own
    assert len(EventBlock._gen_from_etdump(fe.ETDump(run_data=[*runs, other]))) == 2


def test_runs_of_one_block_must_log_the_same_values():
    runs = [_run([_profile("add", 0, 0, 1), _logged(0, offset)]) for offset in (0, 8)]
    buffer = np.array([1, 2, 3, 4], np.float32).tobytes()
    with pytest.raises(DebugDataMismatchError, match="differs between runs"):
        EventBlock._gen_from_etdump(fe.ETDump(run_data=runs), output_buffer=buffer)
    with pytest.raises(AssertionError):  # ExecuTorch's callers catch an AssertionError
        EventBlock._gen_from_etdump(fe.ETDump(run_data=runs), output_buffer=buffer)


def test_a_run_with_only_logged_values_still_has_events():
    delegated = _logged(0, 0, name="inner")
    delegated.debug_event.delegate_debug_id_str = "conv"
    (block,) = EventBlock._gen_from_etdump(fe.ETDump(run_data=[_run([delegated, _logged(1, 0, name="relu")])]))
    assert [(e.name, e.is_delegated_op, e.perf_data) for e in block.events] == [
        ("conv", True, None),
        ("relu", False, None),
    ]
    assert block.events[0].debug_data[0].tolist() == [0.0, 0.0]  # no debug buffer: zeros of the logged shape


def test_delegate_times_go_through_the_converter_and_metadata_is_kept():
    instruction = InstructionEvent(
        InstructionEventSignature(0, 0), profile_events=[_profile("x", 0, 100, 300, 7, b"meta").profile_event]
    )
    signature = EventSignature(0, ProfileEventSignature._gen_from_event(instruction.profile_events[0]))
    event = Event._gen_from_inference_events(
        signature, [instruction], 10.0, delegate_time_scale_converter=lambda name, t: t / 100
    )
    assert (event.name, event.delegate_debug_identifier, event.perf_data.raw) == ("7", 7, [2.0])
    assert event.raw_delegate_debug_metadatas == [b"meta"] and event.delegate_debug_metadatas == [b"meta"]
    assert Event._calculate_elapsed_time(2**32 - 11, 5) == 15  # a 32-bit clock that wrapped


def test_debug_handles_resolve_through_the_delegate_map():
    inner = Event("3", delegate_debug_identifier=3, is_delegated_op=True, _instruction_id=1)
    named = Event("conv", delegate_debug_identifier="conv", is_delegated_op=True, _instruction_id=1)
    call = Event("DELEGATE_CALL", _instruction_id=1)
    plain = Event("add", _instruction_id=0)
    block = EventBlock("Execute", events=[inner, named, call, plain])
    delegate = {"name": "XnnpackBackend", "delegate_map": {"3": [4, 5], "conv": [6]}}
    block._gen_resolve_debug_handles({"0": [1], "1": [4, 5, 6]}, {"1": delegate}, {"1": 2})
    assert (inner.debug_handles, named.debug_handles, call.debug_handles, plain.debug_handles) == (
        [4, 5],
        [6],
        [4, 5, 6],
        [1],
    )
    assert call.delegate_backend_name == inner.delegate_backend_name == "XnnpackBackend" and call.num_outputs == 2
    assert plain.delegate_backend_name is None and plain.num_outputs == 1


def test_runtime_intermediate_outputs_keep_the_last_instruction_and_skip_covered_delegate_calls():
    inspector = Inspector.__new__(Inspector)
    t = torch.ones(2)
    events = [
        Event("a", op_types=["add"], debug_handles=[1], debug_data=[t], _instruction_id=0),
        Event("b", op_types=["add"], debug_handles=[1], debug_data=[t * 2], _instruction_id=2),
        Event("OPERATOR_CALL", op_types=["add"], debug_handles=[1], debug_data=[t], _instruction_id=3),
        Event("3", op_types=["conv"], debug_handles=3, debug_data=[t], is_delegated_op=True, _instruction_id=4),
        Event("DELEGATE_CALL", op_types=["conv"], debug_handles=[3], debug_data=[t], _instruction_id=4),
        Event("timed_only", op_types=["relu"], debug_handles=[9], _instruction_id=5),
    ]
    inspector.event_blocks = [EventBlock("Execute", events=events)]
    outputs, names = inspector._get_runtime_intermediate_outputs_and_op_names()
    assert set(outputs) == {(1,), (3,)} and outputs[(1,)][0][0].tolist() == [2.0, 2.0]
    assert names == {(1,): ["b"], (3,): ["3"]}


def test_capturer_keeps_each_debug_handles_last_output():
    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.layer_norm(x, (3,)).relu()

    x = torch.randn(2, 3)
    edge = to_edge(torch.export.export(Net(), (x,))).exported_program()
    captured = IntermediateOutputCapturer(edge.module()).run_and_capture(x)
    assert all(isinstance(k, tuple) for k in captured) and len(captured) == 2
    last = captured[max(captured)]
    torch.testing.assert_close(last, Net()(x))
    assert not last.requires_grad
    layer_norm = captured[min(captured)]  # native_layer_norm: all three outputs, as a list
    assert isinstance(layer_norm, list) and len(layer_norm) == 3
