"""ExecuTorch's error codes and exception types in the runtime, the cached ``load_method``, the Module's output
getters, and the ``portable_lib`` entry points (ETDump, bundled programs, threads, profiling)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
from edgetorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer
from edgetorch.errors import (
    DelegateLoadError,
    Error,
    ExecutionError,
    InvalidArgumentError,
    MethodNotFoundError,
    ProgramLoadError,
    UnsupportedBackendError,
    UnsupportedOperatorError,
)
from edgetorch.exir import to_edge
from edgetorch.extension.pybindings import portable_lib as pl
from edgetorch.runtime import InvalidInputError, Module, Runtime

ERROR_H = Path(torch.__file__).parents[1] / "executorch/include/executorch/runtime/core/error.h"


class AddCounter(torch.nn.Module):
    """Adds its inputs and counts its calls in a mutable buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x, y):
        self.calls.add_(1)
        return x + y, self.calls + 0


X, Y = torch.randn(2, 3), torch.randn(2, 3)


@pytest.fixture(scope="module")
def program() -> bytes:
    return to_edge(torch.export.export(AddCounter(), (X, Y))).to_executorch().buffer


@pytest.mark.skipif(not ERROR_H.is_file(), reason="ExecuTorch's headers are not installed")
def test_error_codes_are_executorchs():
    declared = dict(re.findall(r"^\s*(\w+) = (0x[0-9a-fA-F]+),", ERROR_H.read_text(), re.M))
    assert {name: int(value, 16) for name, value in declared.items()} == {e.name: e.value for e in Error}


def test_each_runtime_error_is_a_runtime_error_with_its_code():
    cases = {
        ProgramLoadError: Error.InvalidProgram,
        InvalidInputError: Error.InvalidArgument,
        MethodNotFoundError: Error.InvalidArgument,
        UnsupportedOperatorError: Error.OperatorMissing,
        UnsupportedBackendError: Error.NotFound,
        DelegateLoadError: Error.DelegateInvalidCompatibility,
    }
    for error, code in cases.items():
        e = error("what went wrong")
        assert isinstance(e, RuntimeError) and e.code == code
        assert str(e) == f"what went wrong [error 0x{code:02x} {code.name}]"
    assert isinstance(MethodNotFoundError("x"), KeyError) and isinstance(InvalidInputError("x"), ValueError)
    try:
        try:
            raise InvalidArgumentError("kernel argument")
        except InvalidArgumentError as cause:
            raise ExecutionError("instruction 3 failed") from cause
    except ExecutionError as e:
        assert e.code == Error.InvalidArgument and "0x12" in str(e)


def test_runtime_failures_carry_executorchs_codes(program):
    with pytest.raises(ProgramLoadError, match=r"0x23 InvalidProgram"):
        Runtime.get().load_program(b"x" * 100)
    loaded = Runtime.get().load_program(program)
    with pytest.raises(KeyError, match="no method 'nope'"):
        loaded.load_method("nope")
    method = loaded.load_method("forward")
    with pytest.raises(RuntimeError, match=r"expects 2 inputs, got 1 \[error 0x12 InvalidArgument\]"):
        method.execute([X])
    with pytest.raises(RuntimeError, match=r"dimension 0 is static\) \[error 0x10 NotSupported\]"):
        method.execute([torch.randn(4, 3), torch.randn(4, 3)])


def test_load_method_is_cached_with_its_state(program):
    loaded = Runtime.get().load_program(program)
    method = loaded.load_method("forward")
    assert loaded.load_method("forward") is method
    method.execute([X, Y])
    assert float(loaded.load_method("forward").execute([X, Y])[1][0]) == 2.0  # the same buffer, second call
    fresh = loaded.load_method("forward", seed=0)
    assert fresh is not method and float(fresh.execute([X, Y])[1][0]) == 1.0


def test_module_outputs_and_plan_execute(program):
    module = Module(program)
    with pytest.raises(RuntimeError, match="has not run"):
        module.get_outputs()
    module.set_input(X, 0)
    with pytest.raises(InvalidInputError, match=r"unset inputs \[1\]"):
        module.forward()
    module.set_input(Y, 1)
    out = module.forward()
    assert isinstance(out[0], torch.Tensor)  # torch tensors in, torch tensors out
    np.testing.assert_allclose(np.asarray(module.get_output(0)), (X + Y).numpy())
    np.testing.assert_allclose(np.asarray(module.get_output("forward", 1)), [1.0])
    assert len(module.get_outputs()) == 2
    assert float(np.asarray(module.plan_execute()[1])[0]) == 2.0
    with pytest.raises(InvalidInputError, match="index 5"):
        module.get_output(5)
    assert module.unload_method("forward")
    assert float(np.asarray(module.forward([X, Y])[1])[0]) == 1.0  # unloading starts the state over


def test_portable_lib_loaders(program, tmp_path):
    path = tmp_path / "add.pte"
    path.write_bytes(program)
    module = pl._load_for_executorch(str(path), enable_etdump=True, debug_buffer_size=1 << 16)
    assert module.has_etdump()
    module.forward([X, Y])
    module.write_etdump_result_to_file(str(tmp_path / "run.etdp"), str(tmp_path / "run.bin"))
    assert (tmp_path / "run.etdp").stat().st_size > 0 and (tmp_path / "run.bin").stat().st_size > 0
    assert not pl._load_for_executorch_from_buffer(program).has_etdump()
    assert pl._load_program(str(path)).load_method("forward")([X, Y])[0].shape == (2, 3)


def test_portable_lib_bundled_program():
    model = torch.nn.Linear(3, 2).eval()
    inputs = [(torch.randn(1, 3),), (torch.randn(1, 3),)]
    prog = to_edge(torch.export.export(model, inputs[0])).to_executorch()
    cases = [MethodTestCase(inputs=list(x), expected_outputs=(model(*x),)) for x in inputs]
    bpte = serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", cases)]))
    bundle = pl._load_bundled_program_from_buffer(bpte)
    module = pl._load_for_executorch_from_bundled_program(bundle)
    for i in range(2):
        module.load_bundled_input(bundle, "forward", i)
        module.plan_execute("forward")
        module.verify_result_with_bundled_expected_output(bundle, "forward", i)
    with pytest.raises(ProgramLoadError, match="not a BundledProgram"):
        pl._load_bundled_program_from_buffer(prog.buffer)
    with pytest.raises(TypeError, match="_load_bundled_program_from_buffer"):
        pl._load_for_executorch_from_bundled_program(bpte)


def test_threads_and_profiling():
    before = pl._threadpool_get_thread_count()
    try:
        pl._unsafe_reset_threadpool(1)
        assert pl._threadpool_get_thread_count() == 1
    finally:
        pl._unsafe_reset_threadpool(before)
    with pytest.raises(TypeError):
        pl._unsafe_reset_threadpool("2")
    pl._create_profile_block("block")
    pl._reset_profile_results()
    assert pl._dump_profile_results() == b""
