"""Differential fuzzing with ExecuTorch in the loop: ``bench/fuzz.py --differential``.

Each generated module (edgetorch.devtools.fuzz) is lowered four ways (edgetorch and ExecuTorch 1.5.1, each
portable and XNNPACK) and every program is run on both runtimes: edgetorch's in this process, ExecuTorch's in a
child forked per program (tests/executorch_forkserver.py via tests/oracle.py), so a segfault is one crash.
Eight contenders, each compared with eager; ExecuTorch's program on ExecuTorch's runtime is the reference a
refusal is judged by. Findings are shrunk (with the failing contender and the reference only) and written as
minimal ``FILE.py:factory`` sources to ``--keep``; the totals are added to ``differential`` in
bench/results/fuzz.json (the byte-level campaign's counts there are kept).

    .venv/bin/python bench/fuzz.py --differential --cases 200 [--seed 0] [--seconds 3000] [--keep DIR] [--rotate K]

``--rotate K`` is the cheaper campaign: each program runs K of the six contenders that are not ExecuTorch's own
pairs (taking turns, so each is checked on a K/6 share of the programs), and ExecuTorch's pairs run only to
judge a failure (a module every contender gets right does not pay for them).
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import pathlib
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import executorch.exir.passes.dim_order_ops_registry  # noqa: E402, F401  (ExecuTorch owns dim_order_ops, as in tests)
import torch  # noqa: E402

from edgetorch.devtools import fuzz as difffuzz  # noqa: E402
from edgetorch.devtools.fuzz import harness  # noqa: E402


def _executorch_portable(ep: torch.export.ExportedProgram) -> bytes:
    from executorch.exir import to_edge

    return to_edge(ep).to_executorch(_initialized_buffers(ep)).buffer


def _initialized_buffers(ep: torch.export.ExportedProgram) -> Any:
    """ExecuTorch's emitter keeps only the shape and dtype of a buffer the graph mutates (its initial value is
    declared meaningless) unless a pass marks it ``et_init_buffer``: without it the reference starts every mutated
    buffer from zeros where eager (and edgetorch) start from its value. Mark every buffer (torch.export's
    ``buffers_to_mutate`` can be empty for a buffer mutated in place; marking one never mutated changes nothing)."""
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    names = list(ep.graph_signature.buffers)
    return ExecutorchBackendConfig(passes=[InitializedMutableBufferPass(names)] if names else [])


def _executorch_xnnpack(ep: torch.export.ExportedProgram) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    config = _initialized_buffers(ep)
    return to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch(config).buffer


def _executorch_run(pte: bytes, calls: list[tuple[torch.Tensor, ...]]) -> list[list[torch.Tensor]]:
    """ExecuTorch's runtime on the calls, in a forked child; a signal or a hang is a crash, a raise a refusal."""
    from tests.oracle import ExecuTorchCrashed, run_executorch_calls

    try:
        results = run_executorch_calls(pte, [list(call) for call in calls], timeout=120)
    except ExecuTorchCrashed as e:
        text = str(e)
        if "(signal " in text:
            raise harness.ProcessCrashed(text.splitlines()[0]) from None
        raise RuntimeError(_last_error(text)) from None
    except TimeoutError as e:  # subprocess.TimeoutExpired is one
        raise harness.ProcessCrashed(f"no answer within 120 s: {e}") from None
    return [[torch.from_numpy(o) if hasattr(o, "dtype") else torch.tensor(o) for o in call] for call in results]


def _last_error(log: str) -> str:
    """The exception line of a worker's traceback (the first line says only which worker failed)."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln.split(":", 1)[0]]
    return (errors[-1] if errors else lines[-1] if lines else log)[:400]


EXECUTORCH = harness.Lowering("executorch", "portable", _executorch_portable, reference=True)
EXECUTORCH_XNNPACK = harness.Lowering("executorch+xnnpack", "xnnpack", _executorch_xnnpack, reference=True)
EXECUTORCH_RUNTIME = harness.Runner("executorch runtime", _executorch_run, reference=True)
CONTENDERS = tuple(
    harness.Contender(lowering, runner)
    for lowering in (harness.EDGETORCH, harness.EDGETORCH_XNNPACK, EXECUTORCH, EXECUTORCH_XNNPACK)
    for runner in (harness.EDGETORCH_RUNTIME, EXECUTORCH_RUNTIME)
)


def _merge(path: pathlib.Path, campaign: difffuzz.Campaign, findings: list[dict], command: str) -> dict[str, Any]:
    """This campaign's counts added to the ``differential`` totals of ``path`` (other keys untouched)."""
    data = json.loads(path.read_text()) if path.exists() else {}
    totals = data.get("differential", {})
    outcomes = collections.defaultdict(collections.Counter)
    for contender, counts in totals.get("outcomes", {}).items():
        outcomes[contender].update(counts)
    for contender, counts in campaign.outcomes.items():
        outcomes[contender].update(counts)
    kept = {f["sha256"]: f for f in totals.get("findings", [])}
    kept.update({f["sha256"]: f for f in findings})
    totals = {
        "cases": totals.get("cases", 0) + campaign.cases,
        "skipped": totals.get("skipped", 0) + campaign.skipped,
        "agreed": totals.get("agreed", 0) + campaign.agreed,
        "with_findings": totals.get("with_findings", 0) + len(campaign.findings),
        "seconds": round(totals.get("seconds", 0) + campaign.seconds, 1),
        "campaigns": [*totals.get("campaigns", []), command],
        "outcomes": {k: dict(v) for k, v in sorted(outcomes.items())},
        "findings": list(kept.values()),
    }
    data["differential"] = totals
    path.write_text(json.dumps(data, indent=1) + "\n")
    return totals


def run(args: argparse.Namespace, results: pathlib.Path) -> int:
    """The campaign, its findings written to ``args.keep`` and its totals merged into ``results``."""
    command = "bench/fuzz.py " + " ".join(sys.argv[1:])
    found: list[dict] = []

    def progress(index: int, report: harness.Report) -> None:
        notes = [str(o) for o in report.outcomes if o.status != harness.OK]
        text = report.skipped or ("; ".join(notes) if notes else "all agree")
        print(f"[difffuzz] case {index}: {text[:600]}", flush=True)

    def keep(finding: difffuzz.Finding) -> None:
        """Record a finding (and write its minimal module) as soon as it is shrunk: a long campaign may be cut."""
        text = difffuzz.source(finding.minimal) if finding.minimal is not None else ""
        key = text or f"{args.seed}:{finding.index}:{finding.outcome.contender}"  # unshrunk: a repeat of a kind
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        record = {
            "sha256": digest,
            "seed": args.seed,
            "index": finding.index,
            "contender": finding.outcome.contender,
            "status": finding.outcome.status,
            "stage": finding.outcome.stage,
            "detail": finding.outcome.detail[:400],
            "steps": [len(finding.case.steps), len(finding.minimal.steps)] if finding.case and finding.minimal else [],
        }
        found.append(record)
        print(finding.describe(), flush=True)
        if args.keep is not None and text:
            args.keep.mkdir(parents=True, exist_ok=True)
            header = "".join(f"# {k}: {v}\n" for k, v in record.items() if k != "steps")
            args.keep.joinpath(f"case_{digest}.py").write_text(header + text)

    campaign = difffuzz.fuzz(
        args.cases,
        seed=args.seed,
        contenders=CONTENDERS,
        stop_at_first=False,
        shrink_budget=args.shrink_budget,
        seconds=args.seconds,
        on_case=progress,
        on_finding=keep,
        rotate=args.rotate,
    )
    print(campaign.summary(), flush=True)
    totals = _merge(results, campaign, found, command)
    print(f"[difffuzz] totals in {results}: {totals['cases']} cases, {totals['with_findings']} with findings")
    return 1 if campaign.findings else 0
