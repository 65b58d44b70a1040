"""The static operator -> kernel family index matches what the families register, and lookups import only one family."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_index_matches_the_registrations():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from gen_kernel_index import families_from_source
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from edgetorch.runtime.kernels._index import FAMILIES

    found = families_from_source()
    missing = sorted(set(found) - set(FAMILIES))
    stale = sorted(op for op in FAMILIES if found.get(op) != FAMILIES[op])
    assert not missing and not stale, (
        f"kernel index out of date: {len(missing)} operators missing (e.g. {missing[:3]}), {len(stale)} moved or "
        f"removed (e.g. {stale[:3]}); run: .venv/bin/python scripts/gen_kernel_index.py"
    )


def test_looking_up_an_operator_imports_only_its_family():
    script = """
import json, sys
from edgetorch.runtime.kernels.registry import lookup
before = sorted(m for m in sys.modules if m.startswith("edgetorch.runtime.kernels."))
lookup("aten::mm.out")
after = sorted(m for m in sys.modules if m.startswith("edgetorch.runtime.kernels."))
print(json.dumps({"before": before, "after": after}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    families = {m.rpartition(".")[2] for m in seen["after"]} - {"registry", "_index", "promotion", "scratch"}
    assert "linalg" in families and "conv" not in families and "quantized" not in families, families
    assert not any(m.endswith((".linalg", ".conv")) for m in seen["before"])
