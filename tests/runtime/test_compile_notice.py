"""The fast tier says when it compiles, and compiles without numba's on-disk cache when no cache location is
writable (a read-only install without a home directory) instead of failing."""

from __future__ import annotations

import numpy as np
import pytest


def _add_one(x):  # pragma: no cover - compiled
    return x + 1.0


def test_compiles_without_a_writable_cache(monkeypatch, capsys):
    pytest.importorskip("numba")
    from numba.core import caching

    from edgetorch.runtime import policy
    from edgetorch.runtime.kernels import compiled

    if not policy.compiled_tier():
        pytest.skip("the fast tier is off")
    locators = next(c for c in caching.__dict__.values() if isinstance(c, type) and "_locator_classes" in vars(c))
    monkeypatch.setattr(locators, "_locator_classes", [])
    monkeypatch.setattr(compiled, "_told_no_cache", False)
    try:
        fn = compiled.compiled("test_add_one", _add_one)
        assert fn(np.float32(1.5)) == 2.5
    finally:
        compiled._compiled.pop("test_add_one", None)
    assert "NUMBA_CACHE_DIR" in capsys.readouterr().err


def test_the_first_compilation_says_so_once(capsys):
    from edgetorch.runtime.kernels.compiled import _Compiling

    compiling = _Compiling()
    compiling.begin()
    compiling.begin()  # a helper compiled inside the kernel
    compiling.end()
    compiling.end()
    compiling.begin()
    compiling.end()
    assert capsys.readouterr().err.count("edgetorch: compiling") == 1
    assert compiling.count == 2
