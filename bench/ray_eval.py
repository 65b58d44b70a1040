"""Samples per second of an evaluation on Ray (edgetorch.extension.ray) against a loop of ExecuTorch's pybindings.

For each model, one sample a file in a folder (MobileNetV2: a 3x224x224 image as .npy; MiniLM: 32 token ids and
their mask as .npz), each runtime's own XNNPACK program of batch 1, and:

- edgetorch on Ray with 1 and 2 workers (actors of one CPU and one runtime thread each; the program's
  compiled kernels made beforehand by ``edgetorch warmup``, as a user would): the rate over the
  whole run (actors started, every sample read and run) and the steady rate (from the first sample a worker
  started on, its program loaded, to the last result), plus a worker's peak memory (VmHWM; it includes Ray's
  own worker, given apart as "idle Ray worker");
- ExecuTorch's pybindings (``_load_for_executorch``) looping over the same files in one process, at 1 and 2
  threads, and that process's peak memory.

    .venv/bin/python bench/ray_eval.py [--models mobilenet_v2,minilm] [--samples 64]

writes bench/results/ray_eval.md. The machine's other load shows in the figures: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.harness import reexec_with_clean_blas_env, table  # noqa: E402

# A loop of ExecuTorch's pybindings over the sample files, in a process of its own; prints JSON.
ET_LOOP = """
import json, pathlib, sys, time
import numpy as np, torch
import executorch.kernels.quantized  # noqa: F401
from executorch.extension.pybindings.portable_lib import _load_for_executorch, _unsafe_reset_threadpool
_unsafe_reset_threadpool(int(sys.argv[3]))
torch.set_num_threads(int(sys.argv[3]))
files = sorted(pathlib.Path(sys.argv[2]).iterdir())
start = time.perf_counter()
module = _load_for_executorch(sys.argv[1])
for f in files:
    if f.suffix == ".npz":
        with np.load(f) as d:
            inputs = [torch.from_numpy(d[k][None]) for k in sorted(d.files)]
    else:
        inputs = [torch.from_numpy(np.load(f)[None])]
    module.forward(inputs)
seconds = time.perf_counter() - start
hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
print(json.dumps({"seconds": seconds, "hwm": hwm}))
"""


def _peak_memory() -> int:
    """This process's peak resident memory (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


class Probe:
    """A sample transform that leaves the inputs alone and records, in ``folder/<pid>``, its worker's VmHWM and
    when the worker started on its first sample (wall clock, so that the driver can compare)."""

    def __init__(self, folder: str):
        self.folder = folder
        self.first: float | None = None

    def __call__(self, arrays):
        self.first = self.first or time.time()
        record = {"hwm": _peak_memory(), "first": self.first}
        pathlib.Path(self.folder, str(os.getpid())).write_text(json.dumps(record))
        return arrays


def _write_samples(name: str, folder: pathlib.Path, count: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        if name == "minilm":  # token ids of the model's vocabulary, a mask of ones over a random length
            length = int(rng.integers(8, 33))
            ids = rng.integers(1000, 30000, 32).astype(np.int64)
            mask = (np.arange(32) < length).astype(np.int64)
            np.savez(folder / f"s{i:04d}.npz", ids, mask)
        else:
            np.save(folder / f"s{i:04d}.npy", rng.standard_normal((3, 224, 224)).astype(np.float32))


def _programs(name: str, root: pathlib.Path) -> dict[str, str]:
    import torch

    from bench.artifacts import export_artifact
    from bench.models import MODELS

    model, args = MODELS[name]()
    args = tuple(a[:1] for a in args)  # batch 1: both runtimes loop over the samples
    with torch.no_grad():
        return {c: export_artifact(c, model, args, root / name)["path"] for c in ("edgetorch-xnnpack", "et-xnnpack")}


def _on_ray(program: str, folder: pathlib.Path, workers: int, probe: pathlib.Path) -> dict:
    from edgetorch.extension.ray import SampleReader, map_program, read_dataset

    dataset, n = read_dataset(folder, batch_size=8)
    mapped = map_program(
        dataset,
        program,
        keep_outputs=False,
        workers=workers,
        batch_size=8,
        reader=SampleReader(transform=Probe(str(probe))),
    )
    start = time.time()
    rows, errors = 0, 0
    for batch in mapped.iter_batches(batch_size=None, batch_format="pyarrow"):
        rows += batch.num_rows
        errors += sum(1 for e in batch.column("error").to_pylist() if e)
    end = time.time()
    if rows != n or errors:
        raise RuntimeError(f"expected {n} good rows, got {rows} with {errors} errors")
    probes = [json.loads(p.read_text()) for p in probe.iterdir()]
    first = min(p["first"] for p in probes)  # the first sample any worker started on: actors up, program loaded
    return {"samples/s": n / (end - start), "steady": n / (end - first), "hwm": max(p["hwm"] for p in probes)}


def _idle_worker_hwm() -> int:
    import ray

    @ray.remote(num_cpus=1)
    def hwm() -> int:
        return _peak_memory()

    return ray.get(hwm.remote())


def main() -> None:
    reexec_with_clean_blas_env()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="mobilenet_v2,minilm")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ray_eval.md"))
    args = parser.parse_args()

    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Probe, without importing bench/
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    idle = _idle_worker_hwm()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ray-eval-") as tmp:
        root = pathlib.Path(tmp)
        for name in args.models.split(","):
            folder = root / f"{name}-samples"
            _write_samples(name, folder, args.samples)
            programs = _programs(name, root)
            # the fast tier's kernels compiled (and cached on disk) before any timing: a first run would pay for it
            subprocess.run(
                [sys.executable, "-m", "edgetorch", "warmup", programs["edgetorch-xnnpack"], "--threads", "1"],
                cwd=ROOT,
                check=True,
                capture_output=True,
                timeout=1800,
            )
            for workers in (1, 2):
                probe = root / f"{name}-hwm-{workers}"
                probe.mkdir()
                r = _on_ray(programs["edgetorch-xnnpack"], folder, workers, probe)
                rows.append(
                    [
                        name,
                        f"edgetorch on Ray, {workers} worker(s)",
                        f"{r['samples/s']:.1f}",
                        f"{r['steady']:.1f}",
                        f"{r['hwm'] / 1e6:.0f} MB per worker",
                    ]
                )
                print(rows[-1], flush=True)
            for threads in (1, 2):
                done = subprocess.run(
                    [sys.executable, "-c", ET_LOOP, programs["et-xnnpack"], str(folder), str(threads)],
                    capture_output=True,
                    text=True,
                    timeout=3600,
                )
                if done.returncode:
                    raise RuntimeError(done.stderr[-3000:])
                r = json.loads(done.stdout.strip().splitlines()[-1])
                rate = args.samples / r["seconds"]
                rows.append(
                    [
                        name,
                        f"ExecuTorch pybindings loop, {threads} thread(s)",
                        f"{rate:.1f}",
                        f"{rate:.1f}",
                        f"{r['hwm'] / 1e6:.0f} MB",
                    ]
                )
                print(rows[-1], flush=True)
    ray.shutdown()
    text = (
        "# Evaluation on Ray against a loop of ExecuTorch's pybindings\n\n"
        f"`bench/ray_eval.py --samples {args.samples}`: {args.samples} samples a model, XNNPACK programs of batch 1. "
        "samples/s counts the whole run (for Ray: starting the actors and loading the program too); steady counts "
        "from the first sample a worker starts on (for ExecuTorch: loading the program, then the loop). "
        f"An idle Ray worker peaks at {idle / 1e6:.0f} MB.\n\n"
        + table(["model", "runner", "samples/s", "steady samples/s", "peak memory"], rows)
        + "\n"
    )
    pathlib.Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
