"""ExecuTorch's Inspector on ETDump files, in a process of its own: what it makes of each event, as JSON.

Usage: ``python -m tests.devtools.executorch_inspector JOBS``, JOBS a JSON list of ``{"etdump", "etrecord",
"buffer"}`` (the last two may be null). Prints one JSON list per job: per event of every block ``[block,
name, instruction id, debug handles, delegate debug id, op types, samples, debug values]``. :func:`inspect`
is the caller's side.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path


def rows(inspector) -> list[list]:
    """Per event what the fidelity tests compare: the same fields for ExecuTorch's Inspector and ours."""
    out = []
    for block in inspector.event_blocks:
        for e in block.events:
            handles = list(e.debug_handles) if isinstance(e.debug_handles, (list, tuple)) else e.debug_handles
            samples = len(e.perf_data.raw) if e.perf_data is not None else 0
            out.append(
                [block.name, e.name, e._instruction_id, handles, e.delegate_debug_identifier, list(e.op_types)]
                + [samples, len(e.debug_data)]
            )
    return out


def inspect(jobs: list[tuple[Path, Path | None, Path | None]]) -> list[list[list]]:
    """ExecuTorch's Inspector's :func:`rows` for each (etdump, etrecord, debug buffer), from one subprocess."""
    spec = [{"etdump": str(d), "etrecord": r and str(r), "buffer": b and str(b)} for d, r, b in jobs]
    cmd = [sys.executable, "-m", "tests.devtools.executorch_inspector", json.dumps(spec)]
    root = Path(__file__).resolve().parents[2]  # where ``tests`` imports from
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=root)
    if done.returncode:
        raise AssertionError(f"ExecuTorch's Inspector failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(spec: str) -> None:
    warnings.simplefilter("ignore")
    from executorch.devtools import Inspector

    results = []
    for job in json.loads(spec):
        kw = {"etdump_path": job["etdump"], "etrecord": job["etrecord"], "debug_buffer_path": job["buffer"]}
        results.append(rows(Inspector(**kw)))
    print(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
