"""Verification.InternalConsistency rejects, at load_program, programs whose parts refer to things that are not
there; Minimal loads them (a method fails later, when it binds the broken part, or never, if it does not)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edgetorch.errors import EdgetorchError, ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.runtime import Runtime, Verification
from tests.interop.models import MODELS
from tests.oracle import executorch_pte
from tests.runtime.edit_program import add_value, edgetorch_pte, patched


class LinearRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x)).sum(dim=1)


@pytest.fixture(scope="module")
def good() -> bytes:
    return edgetorch_pte(LinearRelu(), (torch.randn(2, 4),))


def _plan(p: fbp.Program) -> fbp.ExecutionPlan:
    return p.execution_plan[0]


def _calls(p: fbp.Program) -> list:
    return [i.instr_args for i in _plan(p).chains[0].instructions]


def _tensors(p: fbp.Program, planned: bool) -> list[fbp.Tensor]:
    found = [ev.val for ev in _plan(p).values if isinstance(ev.val, fbp.Tensor)]
    if planned:
        return [t for t in found if t.allocation_info is not None]
    return [t for t in found if t.allocation_info is None and t.data_buffer_idx > 0]


def value_index_out_of_range(p):
    _calls(p)[-1].args[0] = len(_plan(p).values) + 3


def operator_index_out_of_range(p):
    _calls(p)[0].op_index = 99


def jump_past_the_chain(p):
    cond = add_value(_plan(p), fbp.Bool(True))
    _plan(p).chains[0].instructions.append(fbp.Instruction(fbp.JumpFalseCall(cond, 1000)))


def delegate_index_out_of_range(p):
    _plan(p).chains[0].instructions.append(fbp.Instruction(fbp.DelegateCall(4, [])))


def int_list_names_a_tensor(p):
    tensor = next(i for i, ev in enumerate(_plan(p).values) if isinstance(ev.val, fbp.Tensor))
    next(ev for ev in _plan(p).values if isinstance(ev.val, fbp.IntList)).val.items[0] = tensor


def tensor_planned_past_its_buffer(p):
    t = _tensors(p, planned=True)[0]
    t.allocation_info.memory_offset_low = _plan(p).non_const_buffer_sizes[t.allocation_info.memory_id]


def tensor_in_a_memory_id_that_is_not_planned(p):
    _tensors(p, planned=True)[0].allocation_info.memory_id = 5


def constant_past_the_constant_segment(p):
    _tensors(p, planned=False)[0].sizes = [4096, 4096]


def constant_index_past_the_offsets(p):
    _tensors(p, planned=False)[0].data_buffer_idx = 77


def dim_order_not_a_permutation(p):
    t = _tensors(p, planned=True)[0]
    t.dim_order = [0] * len(t.sizes)


def output_index_out_of_range(p):
    _plan(p).outputs[0] = 10_000


def named_data_in_a_missing_segment(p):
    p.named_data = [fbp.NamedData("weights", 9)]


def broken_second_method(p):
    second = fbp.ExecutionPlan(
        name="never_loaded",
        values=[],
        inputs=[],
        outputs=[3],
        chains=[fbp.Chain([], [], [])],
        operators=[],
        delegates=[],
        non_const_buffer_sizes=[0],
    )
    p.execution_plan.append(second)


CORRUPTIONS = {
    value_index_out_of_range: "instruction .*: refers to values",
    operator_index_out_of_range: "calls operator 99, but the method has",
    jump_past_the_chain: "jumps to instruction 1000",
    delegate_index_out_of_range: "calls delegate 4, but the method has 0 delegates",
    int_list_names_a_tensor: "int list value .* not Int values",
    tensor_planned_past_its_buffer: "needs bytes .* of planned buffer 1, which has",
    tensor_in_a_memory_id_that_is_not_planned: "planned in memory id 5, but the method plans ids 1..1",
    constant_past_the_constant_segment: "needs 67108864 bytes from constant .* the constant segment has",
    constant_index_past_the_offsets: "uses constant 77, but the program has",
    dim_order_not_a_permutation: "dim order .* is not a permutation",
    output_index_out_of_range: "output refers to value 10000",
    named_data_in_a_missing_segment: "named data 'weights' is in segment 9",
    broken_second_method: "method 'never_loaded': output refers to value 3, but the method has 0 values",
}


@pytest.mark.parametrize("edit", list(CORRUPTIONS), ids=lambda f: f.__name__)
def test_internal_consistency_rejects_at_load_what_minimal_loads(good, edit):
    data = patched(good, edit)
    program = Runtime().load_program(data, verification=Verification.Minimal)
    assert "forward" in program.method_names
    with pytest.raises(ProgramLoadError, match="not internally consistent.*" + CORRUPTIONS[edit]):
        Runtime().load_program(data, verification=Verification.InternalConsistency)


@pytest.mark.parametrize("edit", list(CORRUPTIONS), ids=lambda f: f.__name__)
def test_minimal_finds_the_corruption_when_the_method_binds_it_or_runs_correctly(good, edit):
    """What InternalConsistency finds up front, Minimal finds when forward loads; a corruption forward never
    touches (another method, unused named data) leaves forward's results right."""
    x = torch.randn(2, 4)
    program = Runtime().load_program(patched(good, edit), verification=Verification.Minimal)
    try:
        (got,) = program.load_method("forward").execute([x.numpy()])
    except EdgetorchError:
        return
    with torch.no_grad():
        np.testing.assert_allclose(got, LinearRelu()(x).numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["mlp", "convnet", "cond", "dynamic_mlp"])
@pytest.mark.parametrize("writer", ["edgetorch", "executorch"])
def test_real_programs_are_consistent(name, writer):
    factory, make_args, dynamic = MODELS[name]
    args = make_args()
    if writer == "executorch":
        data = executorch_pte(factory().eval(), args, dynamic_shapes=dynamic)
    else:
        from edgetorch.exir import to_edge

        with torch.no_grad():
            ep = torch.export.export(factory().eval(), args, dynamic_shapes=dynamic)
            data = to_edge(ep).to_executorch().buffer
    program = Runtime().load_program(data, verification=Verification.InternalConsistency)
    out = program.load_method("forward").execute([a.numpy() for a in args])
    with torch.no_grad():
        expected = factory().eval()(*args)
    expected = expected if isinstance(expected, (tuple, list)) else [expected]
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


def test_xnnpack_programs_are_consistent():
    factory, make_args, _ = MODELS["mlp"]
    args = make_args()
    data = executorch_pte(factory().eval(), args, xnnpack=True)
    program = Runtime().load_program(data, verification=Verification.InternalConsistency)
    assert program.method_names == {"forward"}


def test_bit_flips_under_internal_consistency_give_typed_errors_only(good):
    rng = np.random.default_rng(0)
    outcomes = {"ok": 0, "rejected at load_program": 0, "rejected later": 0}
    for _ in range(200):
        corrupt = bytearray(good)
        for pos in rng.integers(0, len(corrupt), size=2):
            corrupt[pos] ^= 1 << int(rng.integers(8))
        try:
            program = Runtime().load_program(bytes(corrupt), verification=Verification.InternalConsistency)
        except EdgetorchError:
            outcomes["rejected at load_program"] += 1
            continue
        try:
            program.load_method("forward").execute([np.ones((2, 4), np.float32)])
            outcomes["ok"] += 1
        except EdgetorchError:
            outcomes["rejected later"] += 1
    assert outcomes["rejected at load_program"] > 0, outcomes
