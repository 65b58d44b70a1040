"""Collects every OpInfo sample result of the session; with EDGETORCH_OPINFO_JSON=path, writes them there."""

from __future__ import annotations

import os

import pytest
import torch

from edgetorch.devtools import ops_coverage


@pytest.fixture(scope="session")
def opinfo_results():
    results: list[ops_coverage.SampleResult] = []
    yield results
    path = os.environ.get("EDGETORCH_OPINFO_JSON")
    if path and results:
        ops_coverage.write_results(path, results, {"torch": torch.__version__, "source": "tests/opinfo"})
