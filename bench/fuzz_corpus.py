"""What bench/fuzz.py keeps between campaigns: the corpus folder and the running totals.

A campaign resumes from the kept corpus (bench/corpus/: the seeds that are small enough, plus every mutated case
that reached a new depth or raised a new error type, one file per content hash, listed in ``index.json``) and
adds its counts to the totals of bench/results/fuzz.json. Each campaign takes a seed of its own (the next
unused one unless given): with the seed recorded, no campaign repeats another's cases.

Torch-free and standard library only; bench/fuzz.py is the one caller.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import re

FILE_LIMIT = 64 << 10  # a larger case or seed is not kept (seeds are rebuilt by make_seeds anyway)
TOTAL_LIMIT = 400 << 10  # the folder stays small enough to live in the repository


def signature(kind: str, record: dict) -> str:
    """What a case showed: its format, the stage it reached and how it ended (the error's type, not its text)."""
    error = record.get("detail", "").split(":", 1)[0] if record["outcome"] != "ok" else ""
    return f"{kind}/{record.get('stage', '-')}/{record['outcome']}/{error}"


@dataclasses.dataclass
class Corpus:
    """The kept cases: ``entries`` maps a content hash to its ``kind``, ``origin`` and ``signature``."""

    folder: pathlib.Path
    entries: dict[str, dict] = dataclasses.field(default_factory=dict)

    @classmethod
    def open(cls, folder: pathlib.Path) -> Corpus:
        index = folder / "index.json"
        entries = json.loads(index.read_text()) if index.exists() else {}
        return cls(folder, entries)

    def cases(self) -> list[tuple[str, bytes, str]]:
        """(kind, bytes, origin) of every kept file that is still there."""
        found = []
        for digest, entry in sorted(self.entries.items()):
            path = self.folder / f"{digest}.{entry['kind']}"
            if path.exists():
                found.append((entry["kind"], path.read_bytes(), entry["origin"]))
        return found

    def signatures(self) -> set[str]:
        return {entry["signature"] for entry in self.entries.values()}

    def size(self) -> int:
        return sum(p.stat().st_size for p in self.folder.glob("*") if p.name != "index.json")

    def keep(self, kind: str, data: bytes, origin: str, why: str) -> bool:
        """Add one case unless it is already kept (same bytes), too large, or the folder is full."""
        digest = hashlib.sha256(data).hexdigest()[:16]
        if digest in self.entries or len(data) > FILE_LIMIT or self.size() + len(data) > TOTAL_LIMIT:
            return False
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / f"{digest}.{kind}").write_bytes(data)
        self.entries[digest] = {"kind": kind, "origin": origin, "signature": why}
        return True

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "index.json").write_text(json.dumps(self.entries, indent=1, sort_keys=True) + "\n")


def _add(into: dict, counts: dict) -> None:
    for key, value in counts.items():
        if isinstance(value, dict):
            _add(into.setdefault(key, {}), value)
        else:
            into[key] = into.get(key, 0) + value


def previous_totals(results: dict) -> dict:
    """The totals a results file holds; a file written before campaigns resumed counts as its one campaign."""
    if "totals" in results:
        return results["totals"]
    totals: dict = {"cases": 0, "outcomes": {}, "by_kind": {}, "by_mode": {}, "campaigns": [], "failures": []}
    if "cases" in results:
        seed = re.search(r"--seed (\d+)", results.get("command", ""))
        _add(totals, {k: results[k] for k in ("cases", "outcomes", "by_kind", "by_mode")})
        totals["campaigns"].append(
            {"seed": int(seed.group(1)) if seed else 0, "cases": results["cases"], "command": results["command"]}
        )
        totals["failures"] = results.get("failures", [])
    return totals


def used_seeds(totals: dict) -> set[int]:
    return {campaign["seed"] for campaign in totals["campaigns"]}


def campaign_seed(totals: dict, asked: int | None) -> int:
    """The seed this campaign runs with: the one asked for, or the next after every seed used so far."""
    used = used_seeds(totals)
    if asked is None:
        return max(used, default=-1) + 1
    if asked in used:
        raise SystemExit(
            f"bench/fuzz.py: seed {asked} was already run (seeds used: {sorted(used)}); its cases would repeat. "
            f"Leave --seed out to take the next unused one ({max(used) + 1}), or pass --results to start new totals."
        )
    return asked


def merge(totals: dict, summary: dict) -> dict:
    """``totals`` with one campaign's ``summary`` added (counts per outcome, format, mode and stage reached)."""
    _add(totals, {k: summary[k] for k in ("cases", "outcomes", "by_kind", "by_mode")})
    totals["campaigns"].append({"seed": summary["seed"], "cases": summary["cases"], "command": summary["command"]})
    totals["failures"] = (totals["failures"] + summary["failures"])[:200]
    return totals


def execution_share(totals: dict) -> dict[str, float]:
    """Per mode, the share of ``.pte`` cases that reached ``execute``."""
    share = {}
    for mode, counts in totals["by_mode"].items():
        programs = counts.get("pte programs", 0)
        if programs:
            share[mode] = round(counts.get("pte reached execute", 0) / programs, 3)
    return share
