"""BundledProgram: ExecuTorch's .bpte format both ways, constructor checks, and verification in both runtimes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
from edgetorch.devtools.bundled_program.serialize import (
    deserialize_from_flatbuffer_to_bundled_program,
    serialize_from_bundled_program_to_flatbuffer,
)
from edgetorch.exir import to_edge
from edgetorch.runtime import Module
from edgetorch.runtime.bundled import BundledVerificationError, load_bundled_program


class SampleModel(torch.nn.Module):
    """As ExecuTorch's bundled-program page: two int32 2x2 inputs, two buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("a", 3 * torch.ones(2, 2, dtype=torch.int32))
        self.register_buffer("b", 2 * torch.ones(2, 2, dtype=torch.int32))

    def forward(self, x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        z = x.clone()
        torch.mul(self.a, x, out=z)
        y = x.clone()
        torch.add(z, self.b, out=y)
        torch.add(y, q, out=y)
        return y


def _inputs(n: int = 10) -> list[list[torch.Tensor]]:
    torch.manual_seed(0)
    return [[torch.randint(-5, 5, (2, 2), dtype=torch.int32) for _ in range(2)] for _ in range(n)]


@pytest.fixture(scope="module")
def bundled():
    model = SampleModel().eval()
    inputs = _inputs()
    prog = to_edge(torch.export.export(model, tuple(inputs[0]))).to_executorch()
    cases = [MethodTestCase(inputs=x, expected_outputs=(model(*x),)) for x in inputs]
    bp = BundledProgram(prog, [MethodTestSuite(method_name="forward", test_cases=cases)])
    return model, inputs, prog, bp, serialize_from_bundled_program_to_flatbuffer(bp)


def test_config_and_constructor_checks(bundled):
    model, inputs, prog, *_ = bundled
    case = MethodTestCase(inputs={"x": inputs[0][0], "rest": (inputs[0][1],)}, expected_outputs=None)
    assert len(case.inputs) == 2 and case.expected_outputs == []
    with pytest.raises(AssertionError, match="is not supported"):
        MethodTestCase(inputs=["str"])
    suite = MethodTestSuite(method_name="forward", test_cases=[case])
    assert (suite.method_name, len(suite.test_cases)) == ("forward", 1)
    with pytest.raises(AssertionError, match=r"but \{'MISSING_METHOD_NAME'\} does not include\."):
        BundledProgram(prog, [MethodTestSuite("MISSING_METHOD_NAME", [case])])
    wrong = [inputs[0][0], inputs[0][1].float()]
    with pytest.raises(AssertionError, match=r"dtype shall be torch.int32, but now is torch.float32"):
        BundledProgram(prog, [MethodTestSuite("forward", [MethodTestCase(inputs=wrong)])])
    with pytest.raises(AssertionError, match="number of input"):
        BundledProgram(prog, [MethodTestSuite("forward", [MethodTestCase(inputs=inputs[0][:1])])])


def test_round_trip_and_executorch_reads_ours(bundled):
    from executorch.devtools.bundled_program.serialize import (
        deserialize_from_flatbuffer_to_bundled_program as et_deserialize,
    )

    _, inputs, prog, _, data = bundled
    assert data[4:8] == b"BP08"
    for schema in (deserialize_from_flatbuffer_to_bundled_program(data), et_deserialize(data)):
        (suite,) = schema.method_test_suites
        assert suite.method_name == "forward" and len(suite.test_cases) == len(inputs)
        assert bytes(schema.program) == prog.buffer
        first = suite.test_cases[0].inputs[0].val
        assert bytes(first.data) == inputs[0][0].numpy().tobytes() and list(first.sizes) == [2, 2]


def test_our_runtime_verifies_ours_and_refuses_a_wrong_expectation(bundled, tmp_path):
    model, inputs, prog, _, data = bundled
    module, bundle = Module(data), load_bundled_program(data)
    for i in range(len(inputs)):
        module.load_bundled_input(bundle, "forward", i)
        module.forward()
        module.verify_result_with_bundled_expected_output(bundle, "forward", i)
    wrong = [MethodTestCase(inputs=x, expected_outputs=(model(*x) + 1,)) for x in inputs[:1]]
    bad = serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", wrong)]))
    module = Module(bad)
    module.load_bundled_input(load_bundled_program(bad), "forward", 0)
    module.forward()
    with pytest.raises(BundledVerificationError, match="output 0 differs"):
        module.verify_result_with_bundled_expected_output(load_bundled_program(bad), "forward", 0)
    (tmp_path / "plain.pte").write_bytes(prog.buffer)
    assert Module(str(tmp_path / "plain.pte")).forward(*inputs[0])[0].tolist() == model(*inputs[0]).tolist()


_ET_VERIFY = textwrap.dedent(
    """
    import sys
    from executorch.extension.pybindings.portable_lib import _load_bundled_program_from_buffer
    bundle = _load_bundled_program_from_buffer(open(sys.argv[1], "rb").read())
    for i in range(int(sys.argv[2])):  # loads test case i, runs it and checks the outputs (ExecuTorch 1.5)
        bundle.verify_result_with_bundled_expected_output("forward", i)
    print("verified")
    wrong = _load_bundled_program_from_buffer(open(sys.argv[3], "rb").read())
    try:
        wrong.verify_result_with_bundled_expected_output("forward", 0)
        print("accepted the wrong expectation")
    except Exception:
        print("refused the wrong expectation")
    """
)


def test_executorch_runtime_verifies_ours_and_ours_verifies_theirs(bundled, tmp_path):
    from executorch.devtools import BundledProgram as ETBundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase as ETCase
    from executorch.devtools.bundled_program.config import MethodTestSuite as ETSuite
    from executorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer as et_ser
    from executorch.exir import to_edge as et_to_edge

    model, inputs, prog, _, data = bundled
    wrong = [MethodTestCase(inputs=x, expected_outputs=(model(*x) + 1,)) for x in inputs[:1]]
    bad = serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", wrong)]))
    (tmp_path / "ours.bpte").write_bytes(data)
    (tmp_path / "wrong.bpte").write_bytes(bad)
    args = [str(tmp_path / "ours.bpte"), str(len(inputs)), str(tmp_path / "wrong.bpte")]
    run = subprocess.run([sys.executable, "-c", _ET_VERIFY, *args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "verified" in run.stdout and "refused the wrong expectation" in run.stdout, run.stdout

    theirs_prog = et_to_edge(torch.export.export(model, tuple(inputs[0]))).to_executorch()
    cases = [ETCase(inputs=x, expected_outputs=(model(*x),)) for x in inputs[:3]]
    theirs = et_ser(ETBundledProgram(theirs_prog, [ETSuite(method_name="forward", test_cases=cases)]))
    module, bundle = Module(theirs), load_bundled_program(theirs)
    for i in range(3):
        module.load_bundled_input(bundle, "forward", i)
        module.forward()
        module.verify_result_with_bundled_expected_output(bundle, "forward", i)


def test_test_case_flattens_nested_containers_and_refuses_other_leaves():
    from edgetorch.devtools.bundled_program.config import DataContainer, MethodTestCase

    case = MethodTestCase(inputs=[torch.ones(2), (3, {"scale": 0.5})], expected_outputs=(torch.zeros(1),))
    assert [type(v) for v in case.inputs] == [torch.Tensor, int, float]
    assert len(case.expected_outputs) == 1
    assert isinstance((1,), DataContainer) and isinstance({}, DataContainer)
    with pytest.raises(AssertionError, match="is not supported"):
        MethodTestCase(inputs=["text"])


def test_schema_module_is_the_file_format():
    """devtools.bundled_program.schema names the dataclasses the .bpte reader and writer use."""
    import edgetorch.devtools.bundled_program.schema as bp_schema
    from edgetorch.format import bundled_program as fbp

    value = bp_schema.Value(val=bp_schema.Int(int_val=7))
    bundle = bp_schema.BundledProgram(
        version=fbp.SCHEMA_VERSION,
        method_test_suites=[
            bp_schema.BundledMethodTestSuite(
                method_name="forward",
                test_cases=[bp_schema.BundledMethodTestCase(inputs=[value], expected_outputs=[value])],
            )
        ],
        program=b"",
    )
    back = fbp.deserialize_bundled_program(fbp.serialize_bundled_program(bundle))
    assert type(back.method_test_suites[0].test_cases[0].inputs[0].val) is bp_schema.Int
    assert back.method_test_suites[0].test_cases[0].inputs[0].val.int_val == 7


def test_bundled_module_runs_and_checks_its_own_cases(bundled):
    """portable_lib's BundledModule: verify_result_with_bundled_expected_output(method, i) runs case i and checks it."""
    from edgetorch.extension.pybindings.portable_lib import _load_bundled_program_from_buffer

    model, inputs, prog, _, data = bundled
    bundle = _load_bundled_program_from_buffer(data)
    outputs = bundle.verify_result_with_bundled_expected_output("forward", 1)
    torch.testing.assert_close(torch.as_tensor(outputs[0]), model(*inputs[1]))
    wrong = [MethodTestCase(inputs=x, expected_outputs=(model(*x) + 1,)) for x in inputs[:1]]
    bad = serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", wrong)]))
    with pytest.raises(BundledVerificationError, match="output 0 differs"):
        _load_bundled_program_from_buffer(bad).verify_result_with_bundled_expected_output("forward", 0)
