"""The differential fuzzer's findings, kept: each file of tests/regressions/fuzz/ is a minimal module as
``edgetorch fuzz`` printed it (a ``FILE.py:factory`` source) with a header saying who failed and how. Each must
now agree with eager through edgetorch's portable and XNNPACK lowerings on edgetorch's runtime; one whose fix
is still open names it in an ``# xfail:`` line and is expected to fail (strictly: a fix turns it green and
the marker must go)."""

from __future__ import annotations

import pathlib

import pytest

from edgetorch.devtools.fuzz import check, source_subject

FOLDER = pathlib.Path(__file__).parent / "fuzz"


def _header(text: str) -> dict[str, str]:
    fields = {}
    for line in text.splitlines():
        if not line.startswith("# "):
            break
        key, _, value = line[2:].partition(": ")
        fields[key] = value
    return fields


def _params() -> list:
    params = []
    for path in sorted(FOLDER.glob("*.py")):
        reason = _header(path.read_text()).get("xfail")
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


@pytest.mark.parametrize("path", _params())
def test_kept_finding_agrees_with_eager(path: pathlib.Path):
    report = check(source_subject(path.read_text()))
    assert not report.skipped, report.skipped
    assert not report.findings, "\n".join(map(str, report.findings))
