"""``edgetorch run`` with ``--etdump`` / ``--debug-buffer`` / ``--debug-level`` and a ``.bpte`` with ``--verify`` /
``--bundled-input-index``: ExecuTorch's Inspector reads the ETDumps the command writes."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np
import pytest
import torch

from edgetorch.cli import main
from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
from edgetorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer
from tests.devtools.helpers import lower_edgetorch
from tests.devtools.models import mixed


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["run", *map(str, argv)])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """(model, the two test cases' inputs, the .pte path, the .bpte path)."""
    tmp = tmp_path_factory.mktemp("cli_run")
    model, args = mixed()
    _, prog = lower_edgetorch(model, args)
    inputs = [args, (torch.arange(8.0).reshape(2, 4) / 4,)]
    cases = [MethodTestCase(inputs=list(x), expected_outputs=(model(*x),)) for x in inputs]
    bpte = tmp / "m.bpte"
    bpte.write_bytes(
        serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", cases)]))
    )
    (tmp / "m.pte").write_bytes(prog.buffer)
    return model, inputs, tmp / "m.pte", bpte


def _executorch_inspector(etdump, buffer=None):
    from executorch.devtools import Inspector

    return Inspector(etdump_path=str(etdump), debug_buffer_path=None if buffer is None else str(buffer))


def test_run_writes_an_etdump_executorch_reads_with_intermediates(bundled, tmp_path):
    model, inputs, pte, _ = bundled
    np.save(tmp_path / "x.npy", inputs[0][0].numpy())
    etdump, buffer = tmp_path / "run.etdp", tmp_path / "run.bin"
    code, out = _run(
        pte, "--input", tmp_path / "x.npy", "--iterations", 2, "--etdump", etdump, "--debug-buffer", buffer
    )
    assert code == 0 and f"wrote ETDump {etdump}" in out
    inspector = _executorch_inspector(etdump, buffer)
    (block,) = [b for b in inspector.event_blocks if b.name == "Execute"]  # 3 identical runs, one block
    assert block.bundled_input_index == -1
    (execute,) = [e for e in block.events if e.name == "Method::execute"]
    assert len(execute.perf_data.raw) == 3
    torch.testing.assert_close(block.run_output[0], model(*inputs[0]))
    ops = [e for e in block.events if e.name.startswith("native_call_")]
    assert len(ops) >= 3 and all(e.debug_data for e in ops)


def test_debug_level_outputs_logs_only_the_program_outputs(bundled, tmp_path, capsys):
    model, inputs, pte, _ = bundled
    np.save(tmp_path / "x.npy", inputs[1][0].numpy())
    etdump, buffer = tmp_path / "run.etdp", tmp_path / "run.bin"
    argv = ["--input", tmp_path / "x.npy", "--iterations", 1, "--etdump", etdump, "--debug-buffer", buffer]
    assert _run(pte, *argv, "--debug-level", "outputs")[0] == 0
    (block,) = [b for b in _executorch_inspector(etdump, buffer).event_blocks if b.name == "Execute"]
    torch.testing.assert_close(block.run_output[0], model(*inputs[1]))
    assert not any(e.debug_data for e in block.events if e.name.startswith("native_call_"))
    # without a debug buffer: timings only, and no value asked for that has nowhere to go
    assert _run(pte, "--input", tmp_path / "x.npy", "--iterations", 1, "--etdump", etdump)[0] == 0
    (block,) = [b for b in _executorch_inspector(etdump).event_blocks if b.name == "Execute"]
    assert not block.run_output
    assert main(["run", str(pte), "--random", "--etdump", str(etdump), "--debug-level", "intermediates"]) == 1
    assert "pass --debug-buffer OUT.bin" in capsys.readouterr().err


def test_verify_every_test_case_then_one_by_index_traced(bundled, tmp_path):
    model, inputs, _, bpte = bundled
    code, out = _run(bpte, "--verify", "--iterations", 1)
    assert code == 0 and "forward: 2 of 2 test cases match" in out
    etdump, buffer = tmp_path / "case1.etdp", tmp_path / "case1.bin"
    argv = ["--verify", "--bundled-input-index", 1, "--iterations", 1, "--etdump", etdump, "--debug-buffer", buffer]
    code, out = _run(bpte, *argv)
    assert code == 0 and "forward: 1 of 1 test cases match" in out and "test case 0" not in out
    (block,) = [b for b in _executorch_inspector(etdump, buffer).event_blocks if b.name == "Execute"]
    assert block.bundled_input_index == 1  # ExecuTorch's Inspector reads which test case fed the runs
    torch.testing.assert_close(block.run_output[0], model(*inputs[1]))


def test_verify_fails_on_a_wrong_expected_output_and_a_bad_index(bundled, tmp_path, capsys):
    model, inputs, pte, _ = bundled
    _, prog = lower_edgetorch(model, inputs[0])
    cases = [MethodTestCase(inputs=list(x), expected_outputs=(model(*x) + 0.5 * i,)) for i, x in enumerate(inputs)]
    wrong = tmp_path / "wrong.bpte"
    wrong.write_bytes(
        serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", cases)]))
    )
    code, out = _run(wrong, "--verify", "--iterations", 1)
    assert code == 1 and "test case 0: outputs match" in out and "FAIL" in out and "1 of 2 test cases match" in out
    assert _run(wrong, "--verify", "--bundled-input-index", 0, "--iterations", 1)[0] == 0
    capsys.readouterr()
    assert main(["run", str(wrong), "--bundled-input-index", "2"]) == 1
    assert "has 2 bundled test cases; 2 is out of range" in capsys.readouterr().err
    assert main(["run", str(pte), "--verify"]) == 1
    assert "is not a bundled program (.bpte)" in capsys.readouterr().err


def test_module_load_bundled_input_marks_the_traced_runs(bundled):
    from edgetorch.format.etdump import deserialize_etdump
    from edgetorch.runtime import Module
    from edgetorch.runtime.bundled import load_bundled_program

    *_, bpte = bundled
    data = bpte.read_bytes()
    bundle, module = load_bundled_program(data), Module(data, enable_etdump=True)
    module.execute("forward", [np.zeros((2, 4), np.float32)])
    module.load_bundled_input(bundle, "forward", 1)
    module.execute("forward")
    module.verify_result_with_bundled_expected_output(bundle, "forward", 1)
    runs = [r for r in deserialize_etdump(module.event_tracer().get_etdump_data()).run_data if r.name == "Execute"]
    assert [r.bundled_input_index for r in runs] == [-1, 1]
