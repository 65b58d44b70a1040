"""``edgetorch devtools``: trace into an ETDump, print the Inspector's table, verify a bundled program."""

from __future__ import annotations

import io
from contextlib import redirect_stdout

import numpy as np

from edgetorch.cli import main
from edgetorch.devtools import Inspector
from edgetorch.devtools.bundled_program import BundledProgram, MethodTestCase, MethodTestSuite
from edgetorch.devtools.bundled_program.serialize import serialize_from_bundled_program_to_flatbuffer


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_etdump_inspect_and_verify(traced, tmp_path):
    model, args, prog, etrecord, *_ = traced
    (tmp_path / "m.pte").write_bytes(prog.buffer)
    np.savez(tmp_path / "in.npz", *[a.numpy() for a in args])
    etdump, buffer = str(tmp_path / "m.etdp"), str(tmp_path / "m.bin")
    code, _ = _run("devtools", "etdump", str(tmp_path / "m.pte"), "--inputs", str(tmp_path / "in.npz"), "-o", etdump,
                   "--debug-buffer", buffer, "--runs", "2")  # fmt: skip
    assert code == 0
    code, table = _run("devtools", "inspect", "--etdump", etdump, "--etrecord", str(etrecord), "--debug-buffer", buffer)
    expected = io.StringIO()
    Inspector(etdump_path=etdump, etrecord=str(etrecord), debug_buffer_path=buffer).print_data_tabular(expected)
    assert code == 0 and table == expected.getvalue() and "native_call_convolution.out" in table

    cases = [MethodTestCase(inputs=list(args), expected_outputs=(model(*args),))]
    bpte = tmp_path / "m.bpte"
    bpte.write_bytes(
        serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", cases)]))
    )
    assert _run("devtools", "verify", str(bpte)) == (0, "forward: 1 test cases\nall outputs match\n")
    wrong = [MethodTestCase(inputs=list(args), expected_outputs=(model(*args) + 1,))]
    bpte.write_bytes(
        serialize_from_bundled_program_to_flatbuffer(BundledProgram(prog, [MethodTestSuite("forward", wrong)]))
    )
    code, out = _run("devtools", "verify", str(bpte))
    assert code == 1 and "1 test cases failed" in out
