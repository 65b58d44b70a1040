"""Hostile and broken files: truncations, bit flips, absurd sizes and offsets.

Each either raises one of edgetorch's typed errors or loads and runs; none
crashes, hangs, or allocates beyond the runtime's limit.
"""

from __future__ import annotations

import random
import signal
import struct
from collections import Counter

import numpy as np
import pytest
import torch

from edgetorch.errors import EdgetorchError, ProgramLoadError
from edgetorch.format import program as fbp
from edgetorch.format.pte import load_pte, save_pte
from edgetorch.runtime import Runtime, Verification
from tests.interop.models import MODELS
from tests.oracle import executorch_pte


@pytest.fixture(scope="module")
def real_program():
    factory, make_args, _ = MODELS["mlp"]
    args = make_args()
    return executorch_pte(factory().eval(), args), [a.numpy() for a in args]


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang()


def _attempt(data: bytes, inputs: list) -> str:
    """'ok', or the name of the typed error; anything else fails the test."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(20)  # a hang guard, not a speed check
    try:
        program = Runtime(max_planned_bytes=1 << 28).load_program(data)
        for name in program.method_names:
            program.load_method(name).execute(inputs)
        return "ok"
    except EdgetorchError as e:
        return type(e).__name__
    finally:
        signal.alarm(0)


def test_truncated_at_many_lengths(real_program):
    data, inputs = real_program
    outcomes = Counter(_attempt(data[:n], inputs) for n in range(0, len(data), max(1, len(data) // 300)))
    assert outcomes["ok"] == 0 and set(outcomes) <= {"ProgramLoadError"}, outcomes


def test_random_bit_flips(real_program):
    data, inputs = real_program
    rng = random.Random(0)
    outcomes = Counter()
    for _ in range(400):
        corrupt = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(corrupt))
            corrupt[pos] ^= 1 << rng.randrange(8)
        outcomes[_attempt(bytes(corrupt), inputs)] += 1
    assert sum(outcomes.values()) == 400
    print("bit flips:", dict(outcomes))


def test_not_a_program():
    for data in (b"", b"hello", b"\x00" * 64, b"PK\x03\x04" + bytes(100), np.arange(1000, dtype=np.int64).tobytes()):
        with pytest.raises(ProgramLoadError):
            Runtime.get().load_program(data)


def test_missing_file(tmp_path):
    with pytest.raises(ProgramLoadError, match="cannot read"):
        Runtime.get().load_program(tmp_path / "nope.pte")


def _patched(data: bytes, edit) -> bytes:
    pte = load_pte(data)
    segments = [bytes(pte.segment(i)) for i in range(len(pte.program.segments))]
    edit(pte.program)
    return save_pte(pte.program, segments)


def test_absurd_sizes_and_offsets(real_program):
    data, inputs = real_program

    def huge_arena(p):
        p.execution_plan[0].non_const_buffer_sizes = [0, 1 << 50]

    def huge_tensor(p):
        for v in p.execution_plan[0].values:
            if type(v.val).__name__ == "Tensor":
                v.val.sizes = [1 << 20, 1 << 20, 1 << 10]
                break

    def bad_offset(p):
        for v in p.execution_plan[0].values:
            if type(v.val).__name__ == "Tensor" and v.val.allocation_info is not None:
                v.val.allocation_info.memory_offset_low = 0xFFFFFFF0
                break

    def bad_constant(p):
        p.constant_segment.offsets = [0, 1 << 40]

    def bad_arg(p):
        p.execution_plan[0].chains[0].instructions[0].instr_args.args[0] = 10**6

    def bad_version(p):
        p.version = 7

    for edit in (huge_arena, huge_tensor, bad_offset, bad_constant, bad_arg, bad_version):
        assert _attempt(_patched(data, edit), inputs) == "ProgramLoadError", edit.__name__


def test_nameless_operator_is_a_load_error_under_minimal_verification(real_program):
    data, inputs = real_program

    def nameless(p):
        p.execution_plan[0].operators[0].name = None

    program = Runtime.get().load_program(_patched(data, nameless), Verification.Minimal)
    with pytest.raises(ProgramLoadError, match="has no name"):
        program.load_method("forward")


def test_segment_past_end(real_program):
    data, inputs = real_program
    # the extended header's segment base offset points past the end of the file
    corrupt = bytearray(data)
    struct.pack_into("<Q", corrupt, 24, len(data) * 4)
    assert _attempt(bytes(corrupt), inputs) == "ProgramLoadError"


def test_wrong_inputs(real_program):
    from edgetorch.errors import InvalidInputError

    data, inputs = real_program
    method = Runtime.get().load_program(data).load_method("forward")
    with pytest.raises(InvalidInputError, match="expects 1 inputs"):
        method.execute([])
    with pytest.raises(InvalidInputError, match="dtype"):
        method.execute([inputs[0].astype(np.float64)])
    with pytest.raises(InvalidInputError, match="shape"):
        method.execute([inputs[0][:1]])
    with pytest.raises(InvalidInputError, match="dimensions"):
        method.execute([inputs[0][0]])
    assert torch.is_tensor(torch.as_tensor(method.execute([torch.as_tensor(inputs[0])])[0]))


def test_a_fused_add_whose_operands_do_not_broadcast():
    """Static fusion binds a fixed-shape add straight to ``np.add``; a damaged file whose operand sizes cannot
    broadcast must reach the add kernel's own typed check, not escape as NumPy's ValueError at load."""
    from edgetorch.errors import ExecutionError
    from tests.runtime.edit_program import edgetorch_pte, patched

    class AddRow(torch.nn.Module):
        def forward(self, x, y):
            return x * 2 + y

    data = edgetorch_pte(AddRow(), (torch.randn(2, 3), torch.randn(3)))

    def shrink_row(program):
        plan = program.execution_plan[0]
        plan.values[plan.inputs[1]].val.sizes = [2]

    method = Runtime.get().load_program(patched(data, shrink_row)).load_method("forward")
    with pytest.raises(ExecutionError, match=r"aten::add\.out.*cannot be broadcast"):
        method.execute([np.ones((2, 3), np.float32), np.ones(2, np.float32)])


def _softmax_program() -> bytes:
    from tests.runtime.edit_program import edgetorch_pte

    class Softmax(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("scale", torch.full((2, 3), 2.0))

        def forward(self, x):
            return (x * self.scale).softmax(-1)

    return edgetorch_pte(Softmax(), (torch.randn(2, 3),))


def test_an_input_that_names_a_constant_is_refused_at_load():
    """Found by structure-aware fuzzing: an input index pointing at a constant tensor (read-only file memory)
    made set_inputs fail with NumPy's 'assignment destination is read-only'."""
    from tests.runtime.edit_program import patched

    def input_is_constant(program):
        plan = program.execution_plan[0]
        constant = next(
            i for i, v in enumerate(plan.values) if isinstance(v.val, fbp.Tensor) and v.val.data_buffer_idx > 0
        )
        plan.inputs[0] = constant

    with pytest.raises(ProgramLoadError, match="input 0 is value .*a constant tensor"):
        Runtime.get().load_program(patched(_softmax_program(), input_is_constant)).load_method("forward")


def test_a_fusion_pattern_reading_a_tensor_where_a_flag_belongs_declines():
    """Found by structure-aware fuzzing: softmax's half_to_float flag replaced by a tensor made the static
    softmax pattern raise NumPy's 'truth value of an array is ambiguous' at load. The pattern now declines and
    the instruction runs as its kernel does, which takes the result dtype from the planned output and so
    ignores the flag: the same result as the undamaged program."""
    from tests.runtime.edit_program import patched

    def flag_is_tensor(program):
        plan = program.execution_plan[0]
        for instruction in plan.chains[0].instructions:
            call = instruction.instr_args
            if isinstance(call, fbp.KernelCall) and "softmax" in plan.operators[call.op_index].name:
                call.args[2] = call.args[0]

    data = _softmax_program()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    want = Runtime.get().load_program(data).load_method("forward").execute([x])[0]
    method = Runtime.get().load_program(patched(data, flag_is_tensor)).load_method("forward")
    np.testing.assert_array_equal(method.execute([x])[0], want)
