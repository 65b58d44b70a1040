"""Writes tests/file_seconds.json, each test file's seconds in a JUnit XML report of a whole run (pytest
``--junitxml``), for tests/conftest.py to run the long files first.

    python scripts/test_file_seconds.py report.xml

The figures only order the files; stale or missing ones cost time, never a result.
"""

from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "file_seconds.json"


def file_seconds(report: Path) -> dict[str, float]:
    """Test file path (``tests/...py``) -> the seconds its tests took, setup and teardown included."""
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(report).getroot().iter("testcase"):
        module = [part for part in case.get("classname", "").split(".") if not part[:1].isupper()]
        seconds["/".join(module) + ".py"] += float(case.get("time", 0))
    return {path: round(s, 1) for path, s in sorted(seconds.items())}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    OUT.write_text(json.dumps(file_seconds(Path(sys.argv[1])), indent=0) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
