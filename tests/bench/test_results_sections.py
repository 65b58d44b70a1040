"""bench.harness.replace_section: a benchmark rewrites its own RESULTS.md section and keeps the notes under it."""

from __future__ import annotations

from bench.harness import KEEP_BELOW, replace_section

HEAD = "## Quantization (bench/quant.py)"


def test_rewrite_keeps_notes_and_other_sections(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(
        f"# results\n\n## Time ratios\n\nsuite table\n\n{HEAD}\n\nold table\n\n{KEEP_BELOW}\n\nhand-written note\n\n"
        "### A subsection\n\nmore notes\n\n## LLM\n\nllm table\n"
    )
    replace_section(path, HEAD, f"{HEAD}\n\nnew table\n\n{KEEP_BELOW}\n")
    text = path.read_text()
    assert "old table" not in text and "new table" in text
    for kept in ("suite table", "hand-written note", "### A subsection", "more notes", "## LLM", "llm table"):
        assert kept in text
    assert text.index("new table") < text.index(KEEP_BELOW) < text.index("hand-written note") < text.index("## LLM")
    assert text.count(KEEP_BELOW) == 1


def test_missing_section_is_appended_with_its_marker(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# results\n\n## Time ratios\n\nsuite table\n")
    replace_section(path, HEAD, f"{HEAD}\n\nnew table")
    text = path.read_text()
    assert text.startswith("# results\n\n## Time ratios") and text.rstrip().endswith(KEEP_BELOW)
    replace_section(path, HEAD, f"{HEAD}\n\nnewer table")  # idempotent: one section, one marker
    text = path.read_text()
    assert text.count(HEAD) == 1 and text.count(KEEP_BELOW) == 1 and "newer table" in text and "new table\n" not in text
