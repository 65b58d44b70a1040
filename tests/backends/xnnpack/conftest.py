"""Fixtures shared by the XNNPACK backend's tests."""

from __future__ import annotations

import pytest

from edgetorch.runtime import tuning


@pytest.fixture
def tuned(tmp_path, monkeypatch):
    """Tuning on, with an empty cache directory of its own."""
    monkeypatch.setenv("EDGETORCH_CACHE_DIR", str(tmp_path))
    tuning.forget()
    yield
    tuning.forget()
