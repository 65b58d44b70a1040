"""Every import line of ExecuTorch's docs works with ``executorch`` renamed to ``edgetorch``.

The lines come from the seed docs (one flattened page per file) and the three tutorials; each
distinct statement is one test. Statements outside this project's scope are listed below with
the reason for their group; every other statement must import.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

SEEDS = Path("/work/shared/seeds")
pytestmark = pytest.mark.skipif(not SEEDS.is_dir(), reason=f"the ExecuTorch doc seeds are not at {SEEDS}")

_IDENT = r"[A-Za-z_]\w*"
_ALIASED = rf"{_IDENT}(?:\s+as\s+{_IDENT})?"
# Pages are flattened to one line, so a statement ends where its grammar does, not at a newline.
_FROM = re.compile(rf"\bfrom\s+(executorch(?:\.{_IDENT})*)\s+import\s+(\([^)]*\)|{_ALIASED}(?:\s*,\s*{_ALIASED})*)")
_IMPORT = re.compile(rf"(?<![\w.])import\s+(executorch(?:\.{_IDENT})*)(?:\s+as\s+({_IDENT}))?")


def documented_imports() -> list[str]:
    """Each distinct import statement of the docs, normalised to one line (``executorch`` still in it)."""
    found: set[str] = set()
    pages = sorted(SEEDS.glob("docs/*.md")) + sorted(SEEDS.glob("*.txt"))
    for page in pages:
        text = page.read_text(encoding="utf-8", errors="replace")
        for m in _FROM.finditer(text):
            names = re.sub(r"#[^\n]*\n", " ", m.group(2).strip("()"))  # comments of a line-broken statement
            names = re.sub(r"#\s*noqa\b", " ", names)  # the same comment in a flattened page
            items = [" ".join(part.split()) for part in names.split(",") if part.strip()]
            found.add(f"from {m.group(1)} import {', '.join(items)}")
        for m in _IMPORT.finditer(text):
            found.add(f"import {m.group(1)}" + (f" as {m.group(2)}" if m.group(2) else ""))
    return sorted(found)


# module prefix -> (group, reason). The longest matching prefix decides.
OUT_OF_SCOPE = {
    **dict.fromkeys(
        [
            "executorch.backends.apple",
            "executorch.backends.arm",
            "executorch.backends.cadence",
            "executorch.backends.mediatek",
            "executorch.backends.nxp",
            "executorch.backends.openvino",
            "executorch.backends.qualcomm",
            "executorch.backends.samsung",
            "executorch.backends.vulkan",
        ],
        (
            "hardware backends",
            "their compilers and runtimes need vendor SDKs and devices; edgetorch ships XNNPACK",
        ),
    ),
    "executorch.extension.llm": ("later issue: LLM extension", "export_llm, runners and tokenizers"),
}

# Single statements out of scope, whatever their module.
OUT_OF_SCOPE_STATEMENTS: dict[str, tuple[str, str]] = {}  # none now: the legacy capture API exists too


def _module_of(statement: str) -> str:
    return statement.split()[1]


def scope_of(statement: str) -> tuple[str, str] | None:
    """(group, reason) if ``statement`` is out of scope, else None."""
    if statement in OUT_OF_SCOPE_STATEMENTS:
        return OUT_OF_SCOPE_STATEMENTS[statement]
    module = _module_of(statement)
    matches = [p for p in OUT_OF_SCOPE if module == p or module.startswith(p + ".")]
    return OUT_OF_SCOPE[max(matches, key=len)] if matches else None


STATEMENTS = documented_imports()
# In scope though built elsewhere, expected once merged: the .ptd pass edgetorch.exir.passes.external_constants_pass.
IN_SCOPE = [s for s in STATEMENTS if scope_of(s) is None]


def run_import(statement: str) -> None:
    """Do what ``statement`` does, with ``executorch`` renamed to ``edgetorch``, without exec."""
    statement = re.sub(r"\bexecutorch\b", "edgetorch", statement)
    words = statement.split()
    if words[0] == "import":
        importlib.import_module(words[1])
        return
    module = importlib.import_module(words[1])
    names = statement.split(" import ", 1)[1]
    for item in names.split(","):
        name = item.split()[0]
        if not hasattr(module, name):
            importlib.import_module(f"{module.__name__}.{name}")  # from package import submodule
        assert getattr(module, name) is not None


def test_the_docs_yield_the_statements_this_suite_expects():
    assert len(STATEMENTS) >= 60, STATEMENTS
    assert "from executorch.exir.dialects._ops import ops as exir_ops" in STATEMENTS
    assert "from executorch.runtime import Runtime" in STATEMENTS
    assert "from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner" in STATEMENTS
    # a parenthesised statement spread over lines in a tutorial, comment included
    assert "from executorch.exir.backend.test.backend_with_compiler_demo import BackendWithCompilerDemo" in STATEMENTS


@pytest.mark.parametrize("statement", IN_SCOPE)
def test_documented_import_works_as_edgetorch(statement):
    run_import(statement)


def test_run_import_fails_on_a_missing_name():
    with pytest.raises(ImportError):
        run_import("from executorch.exir import NoSuchName")


def scope_report() -> str:
    """In-scope count and the out-of-scope groups, for humans: ``python -m tests.test_documented_imports``."""
    lines = [f"in scope: {len(IN_SCOPE)} of {len(STATEMENTS)} documented import statements"]
    groups: dict[tuple[str, str], list[str]] = {}
    for s in STATEMENTS:
        if (group := scope_of(s)) is not None:
            groups.setdefault(group, []).append(s)
    for (group, reason), members in sorted(groups.items()):
        lines.append(f"{group} ({len(members)}): {reason}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(scope_report())
