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


def test_the_suite_keeps_one_section_per_cpu(tmp_path):
    from bench.suite import merged_report

    path = tmp_path / "RESULTS.md"
    path.write_text(
        "# edgetorch benchmark results\n\n## Time ratios\n\nold-format table\n\n"
        "## Suite on Intel Xeon\n\n### Time ratios\n\nxeon table\n\n## LLM\n\nllm table\n"
    )
    path.write_text(merged_report(path, "## Suite on AMD EPYC\n\n### Time ratios\n\nepyc table"))
    path.write_text(merged_report(path, "## Suite on AMD EPYC\n\n### Time ratios\n\nnewer epyc table"))
    text = path.read_text()
    assert "old-format table" not in text and "epyc table\n" not in text.replace("newer epyc table", "")
    order = ["## Suite on AMD EPYC", "newer epyc table", "## Suite on Intel Xeon", "xeon table", "## LLM"]
    assert [text.index(s) for s in order] == sorted(text.index(s) for s in order)
    assert text.count("## Suite on") == 2
