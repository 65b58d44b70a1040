"""The same OpInfo samples through edgetorch and through the real ExecuTorch 1.5.1, side by side.

Three sweeps:

* default: the CI set of tests/opinfo (Core ATen OpInfos, first supported dtype, one sample each);
* ``--all``: every OpInfo of PyTorch's ``op_db`` at float32, two samples each (the issue-16 benchmark);
* ``--full``: every OpInfo at every supported dtype of ``ops_coverage.DTYPES``.

Each sample is exported once per contender, lowered with that contender's
``to_edge(...).to_executorch()``, run on its runtime and compared with eager
(see ``edgetorch.devtools.ops_coverage``). ExecuTorch's runtime runs in a worker
process (``tests.executorch_worker.serve``): when it aborts on a program the
sample is recorded as a crash and a new worker takes over. Writes
bench/results/opinfo.md (per-op and per-sample pass counts, every op that fails
with its reason, and the ops where the two differ) and bench/results/opinfo.json
(edgetorch's samples, which ``edgetorch ops --coverage`` reads; ExecuTorch's under
"executorch").

    .venv/bin/python bench/opinfo_compare.py [--all | --full] [--samples N] [--ops add,mul]
        [--ray [--address ADDR] [--workers N]] [--results DIR]

With ``--ray`` every (OpInfo, dtype, runtime) check is one Ray task (bench/ray_pool.py) on a local Ray with
``--workers`` CPUs or the cluster at ``--address``; a check whose Ray worker dies is recorded as a crash of
its samples and the sweep goes on. The tables and files are the same as those of the single-process run.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import pathlib
import sys
import time
from dataclasses import asdict
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import executorch.exir.passes.dim_order_ops_registry  # noqa: E402, F401  (ExecuTorch owns dim_order_ops, as in tests)
import torch  # noqa: E402

from bench.harness import table  # noqa: E402
from edgetorch.devtools import ops_coverage as oc  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results"
STATUSES = (oc.PASS, oc.MISMATCH, oc.RUNTIME_ERROR, oc.LOAD_ERROR, oc.LOWER_ERROR, oc.CRASH, oc.EXPORT_ERROR, oc.SKIP)
RUN_TIMEOUT_S = 120  # a program ExecuTorch has not finished by then counts as a crash (a hang)


class ExecuTorchWorker:
    """ExecuTorch's runtime in a child process, restarted whenever it dies."""

    def __init__(self) -> None:
        self.process: Any = None
        self.conn: Any = None

    def _start(self) -> None:
        from tests.executorch_worker import serve

        context = multiprocessing.get_context("spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(target=serve, args=(child,), daemon=True)
        self.process.start()
        child.close()

    def request(self, kind: str, payload: Any) -> Any:
        """Send one request; its value, RuntimeError when ExecuTorch raised, RuntimeCrashed when it died."""
        if self.process is None or not self.process.is_alive():
            self._start()
        try:
            self.conn.send((kind, payload))
            if not self.conn.poll(RUN_TIMEOUT_S):
                raise TimeoutError(f"no answer within {RUN_TIMEOUT_S} s")
            status, value = self.conn.recv()
        except (EOFError, OSError, TimeoutError) as e:
            self.process.kill()
            self.process.join()
            code = self.process.exitcode
            self.process = None
            raise oc.RuntimeCrashed(f"ExecuTorch's process died (exit code {code}): {type(e).__name__} {e}") from None
        if status == "error":
            raise RuntimeError(value)
        return value


def _executorch_lowering() -> oc.Lowering:
    worker = ExecuTorchWorker()

    def lower(ep: torch.export.ExportedProgram) -> bytes:
        from executorch.exir import to_edge

        return to_edge(ep).to_executorch().buffer

    def load(pte: bytes) -> ExecuTorchWorker:
        worker.request("load", pte)
        return worker

    def execute(method: ExecuTorchWorker, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [o if isinstance(o, torch.Tensor) else torch.tensor(o) for o in method.request("run", inputs)]

    return oc.Lowering("executorch", lower, load, execute)


_LOWERINGS: dict[str, oc.Lowering] = {}


def check_one(full: bool, index: int, dtype: str, samples: int, runtime: str) -> list[oc.SampleResult]:
    """One OpInfo (by its place in ``oc.opinfos(full)``) at one dtype through one runtime; the unit of a Ray task."""
    if runtime not in _LOWERINGS:
        _LOWERINGS[runtime] = oc.EDGETORCH if runtime == "edgetorch" else _executorch_lowering()
    return oc.check_op(oc.opinfos(full)[index], getattr(torch, dtype), samples, _LOWERINGS[runtime])


def _ray_check(full: bool, index: int, dtype: str, samples: int, runtime: str) -> list[oc.SampleResult]:
    from bench import opinfo_compare  # by name, so a Ray worker keeps its ExecuTorch process between tasks

    return opinfo_compare.check_one(full, index, dtype, samples, runtime)


def _op_table(results: list[oc.SampleResult]) -> dict[str, tuple[str, str]]:
    by_op: dict[str, list[oc.SampleResult]] = collections.defaultdict(list)
    for r in results:
        by_op[f"{r.op} ({r.dtype})" if r.dtype != "float32" else r.op].append(r)
    return {op: oc.op_outcome(rs) for op, rs in by_op.items()}


# Failures whose cause was measured outside the sweep, prefixed to the table's reason.
EXPLAINED = {
    "matrix_exp": "eager's float32 result is the less accurate one: against a float64 matrix_exp, torch float32 is "
    "off by 5.4e-3 and 5.0e-2 on the two samples, edgetorch (Pade 13 in float64) by 1.5e-3 and 1.8e-3. ",
    "linalg.ldl_factor": "LAPACK's Bunch-Kaufman sytrf (pivot order included) is not in NumPy; not written yet. ",
    "linalg.ldl_factor_ex": "LAPACK's Bunch-Kaufman sytrf (pivot order included) is not in NumPy; not written yet. ",
    "linalg.ldl_solve": "needs ldl_factor's pivots (LAPACK sytrs); not written yet. ",
}


def _cell(text: str, width: int = 150) -> str:
    return text[:width].replace("|", "/").replace("\n", " ")


def _report(ours: list[oc.SampleResult], theirs: list[oc.SampleResult], seconds: float, mode: str) -> str:
    our_ops, their_ops = _op_table(ours), _op_table(theirs)
    op_rows, sample_rows = [], []
    for name, ops, results in (("edgetorch", our_ops, ours), ("executorch 1.5.1", their_ops, theirs)):
        c = collections.Counter(status for status, _ in ops.values())
        checked = sum(n for s, n in c.items() if s != oc.SKIP)
        op_rows.append([name, f"{c[oc.PASS]} / {checked}", *(str(c[s]) for s in STATUSES)])
        by_dtype: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for r in results:
            by_dtype[r.dtype][r.status] += 1
            by_dtype["all"][r.status] += 1
        sample_rows += [[name, d, *(str(cnt[s]) for s in STATUSES)] for d, cnt in sorted(by_dtype.items())]
    failing = [
        [op, status, their_ops.get(op, ("-", ""))[0], _cell(EXPLAINED.get(op, "") + detail, 300)]
        for op, (status, detail) in sorted(our_ops.items())
        if status != oc.PASS
    ]
    differ = [
        [op, ours_s, theirs_s, _cell(d_ours if ours_s != oc.PASS else d_theirs)]
        for op, (ours_s, d_ours) in sorted(our_ops.items())
        for theirs_s, d_theirs in [their_ops.get(op, ("-", ""))]
        if op in their_ops and (ours_s == oc.PASS) != (theirs_s == oc.PASS)
    ]
    return "\n".join(
        [
            "# OpInfo samples: edgetorch vs ExecuTorch 1.5.1",
            "",
            f"{len(our_ops)} OpInfos, {len(ours)} samples ({mode}); generated by `bench/opinfo_compare.py` "
            f"in {seconds:.0f} s.",
            "Stages: export (torch.export), lower (to_edge + to_executorch), load (load_method), runtime, compare. "
            "An op passes when every sample that got past eager passed; `crash` means the runtime's process died "
            "(ExecuTorch runs in a worker process for that reason); `skip` means no sample could be checked "
            "(complex values, non-tensor outputs, uninitialised memory, eager raised).",
            "",
            "## Ops",
            "",
            table(["runtime", "pass / checked", *STATUSES], op_rows),
            "",
            "## Samples",
            "",
            table(["runtime", "dtype", *STATUSES], sample_rows),
            "",
            f"## Ops edgetorch does not pass ({len(failing)}), with the reason",
            "",
            table(["OpInfo", "edgetorch", "executorch", "reason (first failing sample)"], failing)
            if failing
            else "none",
            "",
            f"## Ops where exactly one of the two passes ({len(differ)})",
            "",
            table(["OpInfo", "edgetorch", "executorch", "detail"], differ) if differ else "none",
            "",
        ]
    )


def main() -> None:
    global RESULTS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sweep = parser.add_mutually_exclusive_group()
    sweep.add_argument("--all", action="store_true", help="all of op_db at float32, two samples per op")
    sweep.add_argument("--full", action="store_true", help="all of op_db and every supported dtype")
    parser.add_argument("--samples", type=int, help="samples per OpInfo and dtype (default: 2 with --all, else 1)")
    parser.add_argument("--ops", help="comma-separated OpInfo names (default: the whole sweep)")
    parser.add_argument("--reverse", action="store_true", help="run the sweep from its last op (a second process)")
    parser.add_argument("--ray", action="store_true", help="spread the checks over Ray workers (bench/ray_pool.py)")
    parser.add_argument("--address", help="with --ray: the Ray cluster's address (default: start a local Ray)")
    parser.add_argument("--workers", type=int, default=2, help="with --ray and no --address: local Ray's CPUs")
    parser.add_argument("--results", type=pathlib.Path, default=RESULTS, help="folder for opinfo.md and opinfo.json")
    parser.add_argument(
        "--merge", nargs="+", metavar="JSON", help="write the report from saved opinfo.json files (no sweep)"
    )
    args = parser.parse_args()
    RESULTS = args.results
    if args.merge:
        return _merge(args.merge)
    samples = args.samples or (2 if args.all else 1)
    full = args.full or args.all
    ops = list(enumerate(oc.opinfos(full)))
    if args.ops:
        wanted = set(args.ops.split(","))
        ops = [(k, o) for k, o in ops if oc.opinfo_name(o) in wanted or o.name in wanted]
    if args.all:
        mode, dtypes = "all of op_db, float32", lambda op: [torch.float32]
    else:
        mode = "full op_db, all dtypes" if args.full else "CI OpInfo set (Core ATen ops), first supported dtype"
        dtypes = lambda op: oc.op_dtypes(op, args.full)  # noqa: E731
    mode += f", up to {samples} samples each"
    if args.reverse:
        ops = ops[::-1]
    jobs = [(k, op, str(d).removeprefix("torch.")) for k, op in ops for d in dtypes(op)]
    start = time.perf_counter()
    if args.ray:
        from bench import ray_pool

        ray = ray_pool.start(args.address, args.workers)
        waits = ray_pool.submit_isolated(
            _ray_check, [(full, k, d, samples, rt) for k, _, d in jobs for rt in ("edgetorch", "executorch")]
        )
        pairs = iter(zip(waits[::2], waits[1::2]))

        def check(op: Any, dtype: str) -> tuple[list[oc.SampleResult], list[oc.SampleResult]]:
            return tuple(_crashed(op, dtype, w()) for w in next(pairs))  # type: ignore[return-value]
    else:
        executorch = _executorch_lowering()

        def check(op: Any, dtype: str) -> tuple[list[oc.SampleResult], list[oc.SampleResult]]:
            d = getattr(torch, dtype)
            return oc.check_op(op, d, samples, oc.EDGETORCH), oc.check_op(op, d, samples, executorch)

    ours, theirs = [], []
    last = {k: i for i, (k, _, _) in enumerate(jobs)}
    for i, (k, op, dtype) in enumerate(jobs):
        a, b = check(op, dtype)
        ours += a
        theirs += b
        print(f"{oc.opinfo_name(op):40s} {oc.op_outcome(a)[0]:14s} {oc.op_outcome(b)[0]}", flush=True)
        if last[k] == i:  # after each op, as before
            _write(ours, theirs, time.perf_counter() - start, mode, samples, done=i + 1 == len(jobs))
    if args.ray:
        ray.shutdown()


def _crashed(op: Any, dtype: str, value: Any) -> list[oc.SampleResult]:
    """A Ray task's results, or one crashed sample when its worker died (the runtime took the Ray worker down)."""
    from bench import ray_pool

    if isinstance(value, ray_pool.Crashed):
        return [oc.SampleResult(oc.opinfo_name(op), dtype, 0, oc.CRASH, f"the Ray worker died: {value.reason}")]
    return value


def _merge(paths: list[str]) -> None:
    """One report from sweeps saved by separate processes (e.g. one run forwards, one ``--reverse``): each op's
    results come from the first file that has them for both runtimes."""
    ours: list[oc.SampleResult] = []
    theirs: list[oc.SampleResult] = []
    seen: set[tuple[str, str]] = set()
    seconds, mode, samples = 0, "", 0
    for path in paths:
        data = json.loads(pathlib.Path(path).read_text())
        meta = data["meta"]
        seconds, mode, samples = seconds + meta["seconds"], meta["mode"], meta["samples"]
        mine = [oc.SampleResult(**r) for r in data["samples"]]
        other = [oc.SampleResult(**r) for r in data["executorch"]]
        both = {(r.op, r.dtype) for r in mine} & {(r.op, r.dtype) for r in other}
        new = both - seen
        ours += [r for r in mine if (r.op, r.dtype) in new]
        theirs += [r for r in other if (r.op, r.dtype) in new]
        seen |= new
    expected = {oc.opinfo_name(op) for op in oc.opinfos(True)}
    done = expected <= {op for op, _ in seen}
    _write(ours, theirs, seconds, mode + f" (merged from {len(paths)} processes)", samples, done=done)


def _write(
    ours: list[oc.SampleResult], theirs: list[oc.SampleResult], seconds: float, mode: str, samples: int, done: bool
) -> None:
    """Save what has run so far (a long sweep can be stopped and still leave its results)."""
    meta = {"torch": torch.__version__, "mode": mode, "samples": samples, "seconds": round(seconds), "complete": done}
    RESULTS.mkdir(exist_ok=True)
    oc.write_results(RESULTS / "opinfo.json", ours, meta)
    data = json.loads((RESULTS / "opinfo.json").read_text())
    data["executorch"] = [asdict(r) for r in theirs]
    (RESULTS / "opinfo.json").write_text(json.dumps(data, indent=1) + "\n")
    report = _report(ours, theirs, seconds, mode)
    (RESULTS / "opinfo.md").write_text(report if done else report + "\n(partial: the sweep was still running)\n")
    if done:
        print(report)


if __name__ == "__main__":
    main()
