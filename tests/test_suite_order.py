"""The suite's own file order (tests/conftest.py): longest recorded files first, each file's tests in order."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests import conftest


def test_files_go_longest_first_and_keep_their_tests_in_order(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "file_seconds.json").write_text(json.dumps({"tests/a.py": 1.0, "tests/b.py": 30.0}))
    names = ["tests/a.py::one", "tests/a.py::two", "tests/new.py::one", "tests/b.py::one", "tests/b.py::two"]
    items = [SimpleNamespace(path=tmp_path / n.split("::")[0], name=n) for n in names]
    conftest._longest_files_first(SimpleNamespace(rootpath=tmp_path), items)
    # b (30 s), then the unrecorded file (conftest._UNRECORDED_SECONDS), then a (1 s)
    assert [i.name for i in items] == [
        "tests/b.py::one",
        "tests/b.py::two",
        "tests/new.py::one",
        "tests/a.py::one",
        "tests/a.py::two",
    ]


def test_without_a_record_the_order_is_left_alone(tmp_path):
    items = [SimpleNamespace(path=tmp_path / "tests" / f"{n}.py") for n in "cab"]
    before = list(items)
    conftest._longest_files_first(SimpleNamespace(rootpath=tmp_path), items)
    assert items == before
