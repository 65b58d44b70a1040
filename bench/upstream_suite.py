"""ExecuTorch's own Python tests, run once against ExecuTorch 1.5.1 and once against edgetorch.

The test files are ExecuTorch's, from the installed ``executorch`` wheel (1.5.1 ships its tests); they
are copied at run time into a scratch directory outside the repository and never committed. Each
file runs in a pytest subprocess of its own, in series, with a time limit:

* baseline: the copy as it is, importing ExecuTorch 1.5.1;
* edgetorch: the copy with its ``executorch.`` imports rewritten to ``edgetorch.``, run with
  ``PYTHONPATH`` set to the edgetorch checkout under test and ``executorch`` made unimportable.
  ExecuTorch's test helpers (every module under a ``test``/``tests``/``examples`` directory of the wheel:
  shared models, the XNNPACK ``Tester``, inspector fixtures) are rewritten the same way into a
  separate tree and served as ``edgetorch.<path>`` only where the checkout has no module of that
  name (bench/upstream_conftest.py).

The figure is "edgetorch passes X of the Y upstream tests that pass on ExecuTorch 1.5.1": a test
counts in Y when it passes on ExecuTorch, and in X when it also passes on edgetorch. Per file the
report gives Y, X and the first reason a Y test fails on edgetorch; over all files it ranks the
modules and names whose absence blocks the most tests. Results go to
bench/results/upstream_suite.json; the baseline is cached there, so ``--edgetorch-only`` reruns only
the edgetorch half (against any checkout with ``--edgetorch-root``).

    .venv/bin/python bench/upstream_suite.py                 # both runs (the baseline takes long)
    .venv/bin/python bench/upstream_suite.py --edgetorch-only --edgetorch-root /work/main
    .venv/bin/python bench/upstream_suite.py --report        # print the tables from the JSON
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "upstream_suite.json"
CONFTEST = Path(__file__).resolve().parent / "upstream_conftest.py"
HELPER_DIRS = {"test", "tests", "testing", "examples"}
TIMEOUT_S = 300

# The files run, by the area of ExecuTorch a user relies on. Order is run order.
SELECTION: dict[str, tuple[str, ...]] = {
    "exir passes": (
        "exir/tests/test_passes.py",
        "exir/tests/test_pass_infra.py",
        "exir/tests/test_remove_view_copy.py",
        "exir/tests/test_reinplace_pass.py",
        "exir/tests/test_prune_empty_tensors_pass.py",
        "exir/tests/test_remove_unused_parameters_pass.py",
        "exir/tests/test_quant_fusion_pass.py",
        "exir/tests/test_memory_format_ops_pass.py",
        "exir/tests/test_dynamic_shape_propagation.py",
        "exir/tests/test_quantize_io_pass.py",
        "exir/tests/test_dim_order_utils.py",
    ),
    "exir core": (
        "exir/program/test/test_program.py",
        "exir/tests/test_tensor.py",
        "exir/tests/test_verification.py",
        "exir/verification/test/test_verifier.py",
        "exir/tests/test_arg_validator.py",
        "exir/tests/test_print_program.py",
        "exir/tests/test_delegate.py",
        "exir/dialects/test/test_exir_dialect_ops.py",
        "exir/dialects/edge/test/test_edge_ops.py",
    ),
    "memory planning": (
        "exir/tests/test_memory_planning.py",
        "exir/tests/test_banked_memory_planning.py",
    ),
    "emit": ("exir/emit/test/test_emit.py",),
    "serialize": (
        "exir/_serialize/test/test_program.py",
        "exir/_serialize/test/test_flatbuffer.py",
        "exir/_serialize/test/test_cord.py",
        "exir/_serialize/test/test_named_data_store.py",
        "exir/_serialize/test/test_serialize.py",
        "extension/flat_tensor/test/test_serialize.py",
    ),
    "backend API": (
        "exir/backend/test/test_backends_lifted.py",
        "exir/backend/test/test_backends_nested.py",
        "exir/backend/test/test_partitioner.py",
        "exir/backend/test/test_lowered_backend_module.py",
        "exir/backend/test/test_to_backend_multi_method.py",
        "exir/backend/test/test_debug_handle_map.py",
        "exir/backend/test/test_delegate_map_builder.py",
        "exir/backend/test/test_compatibility.py",
        "exir/backend/test/test_utils.py",
        "exir/backend/test/test_backend_with_named_data_map.py",
    ),
    "devtools": (
        "devtools/etrecord/tests/etrecord_test.py",
        "devtools/etdump/tests/serialize_test.py",
        "devtools/inspector/tests/inspector_test.py",
        "devtools/inspector/tests/inspector_utils_test.py",
        "devtools/inspector/tests/event_blocks_test.py",
        "devtools/inspector/tests/intermediate_output_capturer_test.py",
        "devtools/bundled_program/test/test_bundle_data.py",
        "devtools/bundled_program/test/test_config.py",
        "devtools/bundled_program/test/test_end2end.py",
        "devtools/bundled_program/serialize/test/test_serialize.py",
        "devtools/backend_debug/tests/test_delegation_info.py",
        "devtools/size_analysis_tool/size_analysis_tool_test.py",
    ),
    "runtime/pybindings": (
        "runtime/test/test_runtime.py",
        "extension/pybindings/test/test_pybindings.py",
        "extension/pybindings/test/test_backend_pybinding.py",
        "runtime/test/test_runtime_xnnpack.py",
    ),
    "training": (
        "extension/training/pybindings/test/test.py",
        "extension/training/examples/XOR/test/test_export.py",
        "exir/tests/test_joint_graph.py",
    ),
    "LLM custom ops": (
        "extension/llm/custom_ops/test_sdpa_with_kv_cache.py",
        "extension/llm/custom_ops/test_update_cache.py",
        "extension/llm/custom_ops/test_quantized_sdpa.py",
        "extension/llm/export/test/test_export_llm.py",
    ),
    "export recipes": (
        "export/tests/test_export_recipe.py",
        "export/tests/test_export_session.py",
        "export/tests/test_executorch_export.py",
        "export/tests/test_export_stages.py",
        "export/tests/test_recipe_registry.py",
        "backends/xnnpack/test/recipes/test_xnnpack_recipes.py",
    ),
    "XNNPACK": (
        "backends/xnnpack/test/test_xnnpack_partitioner.py",
        "backends/xnnpack/test/serialization/test_serialization.py",
        "backends/xnnpack/test/serialization/test_xnnheader.py",
        "backends/xnnpack/test/passes/test_channels_last_tagged_reshape.py",
        "backends/xnnpack/test/passes/test_convert_to_linear.py",
        "backends/xnnpack/test/passes/test_batch_norm_fusion.py",
        "backends/xnnpack/test/passes/test_activation_fusion.py",
        "backends/xnnpack/test/passes/test_remove_get_item_pass.py",
        "backends/xnnpack/test/ops/test_add.py",
        "backends/xnnpack/test/ops/test_conv2d.py",
        "backends/xnnpack/test/ops/test_softmax.py",
        "backends/xnnpack/test/ops/test_cat.py",
    ),
}

# Files in the same areas that are not run, and why. Vendor backends (Arm, Qualcomm, Core ML, Vulkan,
# Cadence, MediaTek, NXP, Samsung, OpenVINO, Cortex-M, MLX, CUDA/AOTI, Metal, WebGPU), codegen and the
# examples/ model zoo are out of scope as a whole: edgetorch ships the portable path and XNNPACK only.
LEFT_OUT: dict[str, str] = {
    "backends/xnnpack/test/ops/*": "the other 44 op files: same Tester path as the 4 run; each costs 1-2 min on ExecuTorch",
    "backends/xnnpack/test/quantizer/*": "tests torchao's PT2E quantizer numerics, not the ExecuTorch stack; slow",
    "backends/xnnpack/test/passes/test_*": "the other passes (insert_pad_qdq, decompose_*, remove_*_copy): time",
    "backends/transforms/test/*": "passes shared by the vendor backends (Vulkan, Arm, Qualcomm), not a user API",
    "exir/tests/test_quantization.py": "needs the C++ quantized_ops_aot library (custom_ops_generated_lib)",
    "exir/tests/test_memory_format_ops_pass_aten.py": "needs ExecuTorch's ATen-mode C++ kernels",
    "exir/tests/test_common.py exir/tests/test_op_convert.py": "listed as failing in ExecuTorch's own pytest.ini",
    "exir/backend/test/demos/*": "need the C++ ATen-mode / RPC demo backends",
    "exir/tests/test_propagate_device_pass.py exir/tests/test_device_copy_ops.py": "multi-device (CUDA) placement",
    "kernels/quantized/test/*": "need the C++ quantized ops library built for tests",
    "runtime/test/test_runtime_etdump_gen.py": "needs a compiler toolchain (listed in ExecuTorch's pytest.ini)",
    "extension/llm/custom_ops/test_preprocess_custom_ops.py": "needs the C++ preprocess ops (listed in pytest.ini)",
    "extension/llm/custom_ops/test_quantized_moe.py extension/llm/custom_ops/test_gated_delta.py": "new ops, CUDA-only paths",
    "extension/llm/modules/test/* extension/llm/tokenizers/test/*": "torchtune modules and tokenizers, not the runtime",
    "test/end2end/*": "not in the 1.5.1 wheel; the GitHub snapshot has no v1.5.1 tag and its helpers postdate 1.5.1",
}

_PREFIX = re.compile(
    r"(?<![\w.])executorch(?=\.[A-Za-z_])|(?<=\bimport )executorch\b|(?<=\bfrom )executorch(?= import)"
)
# torch.fx spells an op's module path with underscores in generated code ("executorch_exir_dialects_edge__ops_
# aten_add_Tensor"), and ExecuTorch's tests match graphs on that spelling; it is the same prefix, rewritten alike.
_GRAPH_NAME = re.compile(r"(?<![A-Za-z0-9])executorch(?=_exir_dialects_)")
_RELATIVE = re.compile(r"^(\s*)from (\.+)([\w.]*) import", re.M)
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_NO_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_NO_ATTR = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")
_EXC = re.compile(
    r"^(?:E\s+)?([A-Z]\w*(?:Error|Exception|Exit|Failed|Interrupt)|[a-z_.]+\.[A-Z]\w*Error)\b:?(.*)$", re.M
)


def executorch_root() -> Path:
    """Where the installed executorch wheel lives (found without importing it)."""
    for entry in sys.path:
        candidate = Path(entry) / "executorch"
        if (candidate / "exir").is_dir():
            return candidate
    raise SystemExit(
        "expected the executorch wheel on sys.path (the shared .venv); found none: run with .venv/bin/python"
    )


def selected_files() -> list[tuple[str, str]]:
    return [(area, path) for area, paths in SELECTION.items() for path in paths]


def rewrite(source: str) -> str:
    """ExecuTorch's import prefix turned into edgetorch's; everything else untouched."""
    return _GRAPH_NAME.sub("edgetorch", _PREFIX.sub("edgetorch", source))


def is_helper(rel: Path) -> bool:
    """A module of ExecuTorch's tests (fixtures, shared models, testers) rather than of the product."""
    stem = rel.stem
    helper_stem = stem.startswith("test_") or stem.endswith(("_test", "_test_utils"))
    return bool(HELPER_DIRS & set(rel.parts[:-1])) or helper_stem or stem in HELPER_DIRS


def build_helpers(et: Path, dest: Path) -> None:
    """Every test-directory module of the wheel, rewritten, in a tree of its own (packages get an __init__)."""
    for source in et.rglob("*.py"):
        rel = source.relative_to(et)
        if "__pycache__" in rel.parts or not is_helper(rel):
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(rewrite(source.read_text(encoding="utf-8", errors="replace")), encoding="utf-8")
    for directory in [dest, *[d for d in dest.rglob("*") if d.is_dir()]]:
        (directory / "__init__.py").touch(exist_ok=True)


def stage(et: Path, rel: str, run_dir: Path, rewritten: bool) -> Path:
    """Copy one test file, and the data files beside it, into the run directory; returns the copy."""
    source = et / rel
    target = run_dir / "files" / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    for item in source.parent.rglob("*"):
        if item.is_file() and item.suffix not in (".py", ".pyc") and "__pycache__" not in item.parts:
            copy = target.parent / item.relative_to(source.parent)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(item, copy)
    text = absolute_imports(source.read_text(encoding="utf-8"), rel)
    target.write_text(rewrite(text) if rewritten else text, encoding="utf-8")
    return target


def absolute_imports(source: str, rel: str) -> str:
    """``from ..verifier import x`` spelled from ``executorch.``: the copy no longer sits in its package."""
    package = ["executorch", *Path(rel).parts[:-1]]

    def absolute(match: re.Match[str]) -> str:
        base = package[: len(package) - len(match.group(2)) + 1]
        return f"{match.group(1)}from {'.'.join(base + ([match.group(3)] if match.group(3) else []))} import"

    return _RELATIVE.sub(absolute, source)


def run_file(test_file: Path, run_dir: Path, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One pytest subprocess for one file; the per-test outcomes its conftest recorded."""
    record = run_dir / "record.jsonl"
    record.unlink(missing_ok=True)
    env = {**env, "UPSTREAM_RECORD": str(record)}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:warnings"]
    command += ["-q", "--tb=short", "--rootdir", str(run_dir), "-c", str(run_dir / "pytest.ini"), str(test_file)]
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    status = "finished"
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        status = "timeout"
    if status == "finished" and process.returncode < 0:
        status = f"crashed (signal {-process.returncode})"
    result: dict[str, Any] = {"status": status, "seconds": round(time.monotonic() - started, 1), "tests": {}}
    lines = record.read_text(encoding="utf-8").splitlines() if record.exists() else []
    for line in lines:
        entry = json.loads(line)
        if "edgetorch" in entry:
            result["edgetorch_module"] = entry["edgetorch"]
        elif "collect" in entry:
            result.setdefault("collection_error", reason(entry))
        else:
            test_id = entry["test"].split("::", 1)[1]
            result["tests"][test_id] = entry["outcome"] if entry["outcome"] != "failed" else reason(entry)
    if not lines:
        result["output_tail"] = output.decode(errors="replace")[-1500:]
    return result


def reason(entry: dict) -> str:
    """A failure as one line: the import that failed (module or name), else the exception class and message."""
    text = entry.get("text", "") + "\n" + entry.get("message", "")
    for pattern, form in ((_NO_NAME, "name {1}.{0}"), (_NO_MODULE, "module {0}"), (_NO_ATTR, "name {0}.{1}")):
        found = pattern.search(text)
        if found and (pattern is not _NO_ATTR or found.group(1).startswith(("edgetorch", "executorch", "torch.ops"))):
            return "import: " + form.format(*found.groups())
    message = entry.get("message", "").strip().splitlines()
    exceptions = _EXC.findall(text)
    if exceptions:
        kind, detail = exceptions[-1]
        return f"{kind}: {detail.strip()[:160]}"
    return (message[0] if message else "failed")[:200]


def prepare(run_dir: Path, helpers: Path | None) -> None:
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    shutil.copyfile(CONFTEST, run_dir / "conftest.py")
    (run_dir / "pytest.ini").write_text("[pytest]\naddopts =\n", encoding="utf-8")
    if helpers is not None:
        helpers.mkdir(parents=True, exist_ok=True)


def run_all(which: str, files: list[tuple[str, str]], results: dict, args: argparse.Namespace) -> None:
    """Runs every file for one contender, in series, saving the JSON after each file."""
    et = executorch_root()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="upstream_suite_"))
    run_dir = scratch / which
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "UPSTREAM_HELPERS")}
    env.setdefault("OMP_NUM_THREADS", "2")
    env.setdefault("EDGETORCH_COMPILE", "wait")  # its tests time nothing, but check what a compiled run gives
    if which == "edgetorch":
        helpers = scratch / "helpers"
        prepare(run_dir, helpers)
        build_helpers(et, helpers)
        env["PYTHONPATH"] = str(Path(args.edgetorch_root).resolve())
        env["UPSTREAM_HELPERS"] = str(helpers)
    else:
        prepare(run_dir, None)
    for area, rel in files:
        entry = results["files"].setdefault(rel, {"area": area})
        entry["area"] = area
        if which == "edgetorch" and not passing(entry.get("executorch", {})) and not args.all_files:
            entry["edgetorch"] = {"status": "not run: no test passes on ExecuTorch", "tests": {}}
            continue
        test_file = stage(et, rel, run_dir, rewritten=which == "edgetorch")
        print(f"[{which}] {rel} ...", end=" ", flush=True)
        entry[which] = run_file(test_file, run_dir, env, args.timeout)
        outcome = entry[which]
        counts = collections.Counter(v if v in ("passed", "skipped") else "failed" for v in outcome["tests"].values())
        print(f"{outcome['status']} {outcome['seconds']}s {dict(counts)}", flush=True)
        save(results, Path(args.results))
    results[f"{which}_scratch"] = str(scratch)


def passing(outcome: dict) -> set[str]:
    return {t for t, v in outcome.get("tests", {}).items() if v == "passed"}


def file_rows(results: dict) -> list[dict]:
    """Per file: Y (passing on ExecuTorch), X (of those, passing on edgetorch) and the first blocker."""
    rows = []
    order = {rel: i for i, (_, rel) in enumerate(selected_files())}
    for rel, entry in sorted(results["files"].items(), key=lambda item: (order.get(item[0], len(order)), item[0])):
        base, ours = entry.get("executorch", {}), entry.get("edgetorch", {})
        y_tests = passing(base)
        x_tests = y_tests & passing(ours)
        failures = [why_failed(test, ours) for test in sorted(y_tests - x_tests)]
        first = failures[0] if failures else ""
        if not y_tests:
            first = "baseline: " + (base.get("collection_error") or base.get("status", "not run"))
        rows.append({"file": rel, "area": entry["area"], "Y": len(y_tests), "X": len(x_tests), "first": first})
    return rows


def why_failed(test: str, ours: dict) -> str:
    """The reason one test that passes on ExecuTorch does not pass on edgetorch."""
    if "collection_error" in ours:
        return "collection " + ours["collection_error"]
    outcome = ours.get("tests", {}).get(test)
    if outcome is None:
        return f"not reached ({ours.get('status', 'not run')})"
    return "skipped on edgetorch" if outcome == "skipped" else outcome


def blockers(results: dict) -> list[tuple[str, int]]:
    """Missing modules and names, ranked by how many ExecuTorch-passing tests they block."""
    count: collections.Counter[str] = collections.Counter()
    for entry in results["files"].values():
        base, ours = entry.get("executorch", {}), entry.get("edgetorch", {})
        for test in passing(base) - passing(ours):
            why = why_failed(test, ours)
            if "import: " in why:
                count[why.split("import: ", 1)[1]] += 1
    return count.most_common()


def behaviour(results: dict) -> list[tuple[str, str, str]]:
    """Tests past collection that fail on edgetorch for a reason other than a missing import."""
    found = []
    for rel, entry in results["files"].items():
        base, ours = entry.get("executorch", {}), entry.get("edgetorch", {})
        if "collection_error" in ours:
            continue
        for test in sorted(passing(base) - passing(ours)):
            why = why_failed(test, ours)
            if "import: " not in why:
                found.append((rel, test, why))
    return found


def report(results: dict, top: int) -> str:
    rows = file_rows(results)
    y_total = sum(r["Y"] for r in rows)
    x_total = sum(r["X"] for r in rows)
    counted = [r for r in rows if r["Y"]]
    lines = [
        f"edgetorch passes {x_total} of the {y_total} upstream tests that pass on ExecuTorch 1.5.1 "
        f"({len(counted)} files with a passing test, of {len(rows)} run)",
        "",
        "| area | file | Y | X | first failure on edgetorch |",
        "|---|---|---:|---:|---|",
    ]
    for r in rows:
        lines.append(f"| {r['area']} | `{r['file']}` | {r['Y']} | {r['X']} | {r['first'][:140].replace('|', '/')} |")
    lines += ["", f"Top {top} blockers (missing module / name -> ExecuTorch-passing tests blocked):", ""]
    lines += [f"{n:5d}  {name}" for name, n in blockers(results)[:top]]
    kinds = collections.Counter(why.split(":", 1)[0] for _, _, why in behaviour(results))
    lines += [
        "",
        "Past collection, failing for other reasons (by exception): "
        + ", ".join(f"{k} {n}" for k, n in kinds.most_common()),
    ]
    return "\n".join(lines)


def save(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--edgetorch-only", action="store_true", help="reuse the cached ExecuTorch baseline")
    parser.add_argument("--executorch-only", action="store_true", help="refresh the baseline only")
    parser.add_argument(
        "--edgetorch-root", default=str(REPO), help="the edgetorch checkout to test (default: this one)"
    )
    parser.add_argument("--files", default="", help="comma-separated substrings: run only the matching files")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per file")
    parser.add_argument("--scratch", default="", help="scratch directory (default: a new one under $TMPDIR)")
    parser.add_argument("--all-files", action="store_true", help="also run files with no test passing on ExecuTorch")
    parser.add_argument(
        "--results", default=str(RESULTS), help="the JSON file (default: bench/results/upstream_suite.json)"
    )
    parser.add_argument("--report", action="store_true", help="only print the report from the JSON")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    if not (Path(args.edgetorch_root) / "edgetorch" / "__init__.py").exists():
        raise SystemExit(f"expected an edgetorch checkout at {args.edgetorch_root} (edgetorch/__init__.py); found none")
    path = Path(args.results)
    results = json.loads(path.read_text()) if path.exists() else {"files": {}}
    files = selected_files()
    if args.files:
        files = [(a, f) for a, f in files if any(s in f for s in args.files.split(","))]
    if not args.report:
        if args.edgetorch_only and not any("executorch" in results["files"].get(f, {}) for _, f in files):
            raise SystemExit(f"--edgetorch-only needs a cached baseline in {path}; found none: run without it once")
        if not args.edgetorch_only:
            run_all("executorch", files, results, args)
        if not args.executorch_only:
            results["edgetorch_root"] = str(Path(args.edgetorch_root).resolve())
            run_all("edgetorch", files, results, args)
        results["left_out"] = LEFT_OUT
        save(results, path)
    print(report(results, args.top))


if __name__ == "__main__":
    main()
