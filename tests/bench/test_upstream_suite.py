"""bench/upstream_suite.py: the import rewrite, the helper tree, the failure reasons and the figure's arithmetic,
and one pytest subprocess on a made-up upstream test file, end to end."""

from __future__ import annotations

import os
from pathlib import Path

from bench import upstream_suite as us

REPO = Path(__file__).resolve().parents[2]


def test_rewrite_changes_import_prefixes_only() -> None:
    source = (
        "import executorch\n"
        "import executorch.exir as exir\n"
        "from executorch.exir import to_edge\n"
        "from executorch import exir\n"
        'patch("executorch.exir.program._program.foo")\n'
        "torch.ops.executorch_prims.add.int\n"
        "prog.to_executorch()\n"
        'Library("executorch", "DEF")\n'
        'check_count({"executorch_exir_dialects_edge__ops_aten_add_Tensor": 1, "executorch_call_delegate": 1})\n'
    )
    assert us.rewrite(source) == (
        "import edgetorch\n"
        "import edgetorch.exir as exir\n"
        "from edgetorch.exir import to_edge\n"
        "from edgetorch import exir\n"
        'patch("edgetorch.exir.program._program.foo")\n'
        "torch.ops.executorch_prims.add.int\n"
        "prog.to_executorch()\n"
        'Library("executorch", "DEF")\n'
        'check_count({"edgetorch_exir_dialects_edge__ops_aten_add_Tensor": 1, "executorch_call_delegate": 1})\n'
    )


def test_helpers_are_test_directory_modules() -> None:
    assert us.is_helper(Path("exir/tests/models.py"))
    assert us.is_helper(Path("backends/xnnpack/test/tester/tester.py"))
    assert us.is_helper(Path("devtools/bundled_program/util/test_util.py"))
    assert us.is_helper(Path("devtools/inspector/tests/inspector_test_utils.py"))
    assert not us.is_helper(Path("exir/passes/memory_planning_pass.py"))
    assert us.is_helper(Path("extension/training/examples/XOR/model.py"))
    assert not us.is_helper(Path("exir/testing_utils.py"))


def test_reason_names_the_missing_import_or_the_exception() -> None:
    text = "E   ModuleNotFoundError: No module named 'edgetorch.exir._serialize'"
    assert us.reason({"text": text}) == "import: module edgetorch.exir._serialize"
    text = "E   ImportError: cannot import name 'ExirExportedProgram' from 'edgetorch.exir' (/x/__init__.py)"
    assert us.reason({"text": text}) == "import: name edgetorch.exir.ExirExportedProgram"
    text = "E   AttributeError: module 'edgetorch.exir.passes' has no attribute 'MemoryPlanningPass'"
    assert us.reason({"text": text}) == "import: name edgetorch.exir.passes.MemoryPlanningPass"
    text = "    self.assertEqual(a, b)\nE   AssertionError: 3 != 4"
    assert us.reason({"text": text, "message": "AssertionError: 3 != 4"}) == "AssertionError: 3 != 4"
    text = "E   AttributeError: 'Foo' object has no attribute 'bar'"
    assert us.reason({"text": text}) == "AttributeError: 'Foo' object has no attribute 'bar'"


def test_figure_counts_edgetorch_passes_among_executorch_passes() -> None:
    results = {
        "files": {
            "a/test_a.py": {
                "area": "x",
                "executorch": {"tests": {"t1": "passed", "t2": "passed", "t3": "skipped", "t4": "AssertionError: no"}},
                "edgetorch": {
                    "tests": {"t1": "passed", "t2": "TypeError: f() takes 1", "t3": "passed", "t4": "passed"}
                },
            },
            "b/test_b.py": {
                "area": "y",
                "executorch": {"tests": {"u1": "passed", "u2": "passed"}},
                "edgetorch": {"collection_error": "import: module edgetorch.exir.tests", "tests": {}},
            },
        }
    }
    rows = {row["file"]: row for row in us.file_rows(results)}
    assert (rows["a/test_a.py"]["Y"], rows["a/test_a.py"]["X"]) == (2, 1)
    assert rows["a/test_a.py"]["first"] == "TypeError: f() takes 1"
    assert (rows["b/test_b.py"]["Y"], rows["b/test_b.py"]["X"]) == (2, 0)
    assert us.blockers(results) == [("module edgetorch.exir.tests", 2)]
    assert us.behaviour(results) == [("a/test_a.py", "t2", "TypeError: f() takes 1")]
    assert us.report(results, 5).startswith("edgetorch passes 1 of the 4 upstream tests")


def test_one_upstream_file_through_the_edgetorch_run(tmp_path: Path) -> None:
    wheel = tmp_path / "wheel"
    (wheel / "exir" / "tests").mkdir(parents=True)
    (wheel / "exir" / "tests" / "fixtures.py").write_text(
        "import executorch.exir\nVALUE = executorch.exir.__name__\n", encoding="utf-8"
    )
    (wheel / "exir" / "tests" / "test_made_up.py").write_text(
        "from executorch.exir.tests.fixtures import VALUE\n"
        "def test_helper_is_served():\n    assert VALUE == 'edgetorch.exir'\n"
        "def test_behaviour():\n    assert 1 == 2, 'differs'\n"
        "def test_late_import():\n    from executorch.exir.no_such_module import X\n"
        "def test_executorch_is_blocked():\n    import importlib; importlib.import_module('exe' + 'cutorch')\n",
        encoding="utf-8",
    )
    run_dir, helpers = tmp_path / "run", tmp_path / "helpers"
    us.prepare(run_dir, helpers)
    us.build_helpers(wheel, helpers)
    copy = us.stage(wheel, "exir/tests/test_made_up.py", run_dir, rewritten=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(REPO), UPSTREAM_HELPERS=str(helpers))
    result = us.run_file(copy, run_dir, env, timeout=300)
    assert result["status"] == "finished", result
    assert result["edgetorch_module"] == str(REPO / "edgetorch" / "__init__.py")
    tests = result["tests"]
    assert tests["test_helper_is_served"] == "passed"
    assert tests["test_behaviour"].startswith("AssertionError: differs")
    assert tests["test_late_import"] == "import: module edgetorch.exir.no_such_module"
    assert tests["test_executorch_is_blocked"] == "import: module executorch"


def test_relative_imports_become_absolute() -> None:
    source = "from ..verifier import EXIREdgeDialectVerifier\n    from . import models\n"
    assert us.absolute_imports(source, "exir/verification/test/test_verifier.py") == (
        "from executorch.exir.verification.verifier import EXIREdgeDialectVerifier\n"
        "    from executorch.exir.verification.test import models\n"
    )
