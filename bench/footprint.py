"""Import time and peak memory of each runtime, measured in fresh interpreters.

Each probe is a new Python process that imports one runtime (timed), loads one
model file and runs it once (timed), then reports its peak resident memory.
Peak memory is the process's VmHWM from /proc: ``getrusage`` maxrss would also
count the pages of the (large) process that launched the probe, because Linux
carries the high-water mark across fork+exec. Medians over repeats.

    .venv/bin/python bench/footprint.py [--model mobilenet_v2] [--repeats 5]

exports the model with both compilers and to ONNX, then writes bench/results/footprint.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env, table  # noqa: E402

PROBE = """
import json, sys, time
t0 = time.perf_counter()
{import_line}
t1 = time.perf_counter()
import numpy as np
path, specs = sys.argv[1], json.loads(sys.argv[2])
rng = np.random.default_rng(0)
inputs = [rng.standard_normal(s).astype(d) if d.startswith("float") else np.zeros(s, d) for s, d in specs]
{load_run}
t2 = time.perf_counter()
status = dict(ln.split(":", 1) for ln in open("/proc/self/status").read().splitlines() if ":" in ln)
kernels = [m for m in sys.modules if m.startswith("edgetorch.runtime.kernels.") and not m.endswith(".registry")]
print(json.dumps({{"import_s": t1 - t0, "load_run_s": t2 - t1, "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
                  "kernel_modules": len(kernels)}}))
"""

RUNTIMES: dict[str, tuple[str, str]] = {
    "edgetorch": (
        "import edgetorch.runtime",
        "edgetorch.runtime.Runtime.get().load_program(path).load_method('forward').execute(inputs)",
    ),
    "executorch": (
        "import executorch.runtime",
        "import torch\n"
        "method = executorch.runtime.Runtime.get().load_program(path).load_method('forward')\n"
        "method.execute([torch.from_numpy(x) for x in inputs])",
    ),
    "onnxruntime": (
        "import onnxruntime",
        "session = onnxruntime.InferenceSession(path, providers=['CPUExecutionProvider'])\n"
        "session.run(None, {i.name: x for i, x in zip(session.get_inputs(), inputs)})",
    ),
}
"""Runtime name -> (the import a user writes, loading the file and running it once)."""

RUNTIME_OF = {
    "edgetorch-xnnpack": "edgetorch",
    "edgetorch-portable": "edgetorch",
    "et-xnnpack": "executorch",
    "et-portable": "executorch",
    "ort": "onnxruntime",
}
"""Which runtime loads each contender's file."""


def probe(runtime: str, path: str, input_specs: list, repeats: int) -> dict[str, float]:
    """Median import seconds, load+run seconds and peak RSS (MB) of ``runtime`` on ``path`` over fresh processes."""
    return run_probe(*RUNTIMES[runtime], path, input_specs, repeats)


def run_probe(
    import_line: str, load_run: str, path: str, input_specs: list, repeats: int, cwd: pathlib.Path = ROOT
) -> dict[str, float]:
    """Medians over ``repeats`` fresh interpreters that run ``import_line`` then ``load_run`` (see PROBE)."""
    code = PROBE.format(import_line=import_line, load_run=load_run)
    env = {**os.environ, "PYTHONPATH": f"{cwd}:{ROOT}"}
    runs = []
    for _ in range(repeats):
        cmd = [sys.executable, "-c", code, str(path), json.dumps(input_specs)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
        if done.returncode != 0:
            raise RuntimeError(f"probe of {import_line!r} on {path} failed:\n{done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def measure(artifacts: dict[str, str], input_specs: list, repeats: int = 5) -> list[dict]:
    """One row per contender file in ``artifacts`` (contender -> path); a failed probe keeps its error text."""
    rows = []
    for contender, path in artifacts.items():
        runtime = RUNTIME_OF[contender]
        row = {"contender": contender, "runtime": runtime, "file_mb": os.path.getsize(path) / 1e6}
        try:
            row.update(probe(runtime, path, input_specs, repeats))
        except RuntimeError as e:
            row["error"] = str(e).splitlines()[-1][:120]
        rows.append(row)
    return rows


def describe(model: str) -> str:
    return (
        f"Fresh interpreter per measurement: `import` of the runtime, then load {model}'s file and run it once; "
        "peak RSS is the process's VmHWM. Median of the repeats."
    )


def report_table(rows: list[dict]) -> str:
    from bench.plots import LABELS

    headers = ["file (runtime)", "import s", "load + 1 run s", "peak RSS MB"]
    body = []
    for r in rows:
        label = f"{LABELS[r['contender']]} .{'onnx' if r['runtime'] == 'onnxruntime' else 'pte'} ({r['runtime']})"
        if "error" in r:
            body.append([label, f"error: {r['error']}", "-", "-"])
        else:
            body.append([label, f"{r['import_s']:.2f}", f"{r['load_run_s']:.2f}", f"{r['peak_rss_mb']:.0f}"])
    return table(headers, body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet_v2")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reexec_with_clean_blas_env()
    from bench.artifacts import export_artifact
    from bench.models import MODELS

    model, inputs = MODELS[args.model]()
    specs = [[list(x.shape), str(x.numpy().dtype)] for x in inputs]
    with tempfile.TemporaryDirectory(prefix="edgetorch-footprint-") as tmp:
        stem = pathlib.Path(tmp) / args.model
        artifacts = {c: export_artifact(c, model, inputs, stem)["path"] for c in RUNTIME_OF}
        rows = measure(artifacts, specs, args.repeats)
    table_md = report_table(rows)
    print(table_md)
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "footprint.md").write_text(
        "# Runtime import time and peak memory\n\n" + describe(args.model) + "\n\n" + table_md + "\n"
    )


if __name__ == "__main__":
    main()
