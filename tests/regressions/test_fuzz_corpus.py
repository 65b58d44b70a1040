"""bench/fuzz_corpus.py: campaigns resume. Totals add up over campaigns (per outcome, format, mode and stage), a
seed already run is refused so no campaign repeats another's cases, the kept corpus deduplicates by content and
stays within its size limit, and a results file written before campaigns resumed counts as its one campaign."""

from __future__ import annotations

import pathlib

import pytest

from bench import fuzz_corpus


def _summary(seed: int, ok: int, typed: int) -> dict:
    return {
        "command": f"bench/fuzz.py --seed {seed}",
        "seed": seed,
        "cases": ok + typed,
        "outcomes": {"ok": ok, "typed": typed},
        "by_kind": {"pte": {"ok": ok, "typed": typed}},
        "by_mode": {"structure": {"pte programs": ok + typed, "pte reached execute": ok}},
        "failures": [],
    }


def test_totals_accumulate_and_seeds_do_not_repeat():
    totals = fuzz_corpus.previous_totals({})
    assert fuzz_corpus.campaign_seed(totals, None) == 0
    fuzz_corpus.merge(totals, _summary(0, 3, 7))
    fuzz_corpus.merge(totals, _summary(fuzz_corpus.campaign_seed(totals, None), 5, 5))
    assert totals["cases"] == 20
    assert totals["by_kind"]["pte"] == {"ok": 8, "typed": 12}
    assert fuzz_corpus.execution_share(totals) == {"structure": 0.4}
    assert fuzz_corpus.campaign_seed(totals, None) == 2
    with pytest.raises(SystemExit, match="seed 1 was already run"):
        fuzz_corpus.campaign_seed(totals, 1)


def test_a_results_file_from_before_resuming_is_one_campaign():
    old = _summary(11, 2, 4) | {"command": "bench/fuzz.py --cases 6 --seed 11"}
    totals = fuzz_corpus.previous_totals(old)
    assert totals["cases"] == 6 and totals["campaigns"][0]["seed"] == 11
    assert fuzz_corpus.campaign_seed(totals, None) == 12


def test_kept_corpus_dedups_and_stays_small(tmp_path: pathlib.Path):
    kept = fuzz_corpus.Corpus.open(tmp_path)
    assert kept.keep("pte", b"abc", "mlp.pte", "pte/execute/ok/")
    assert not kept.keep("pte", b"abc", "cnn.pte", "pte/load/typed/ProgramLoadError")  # same bytes
    assert not kept.keep("pte", bytes(fuzz_corpus.FILE_LIMIT + 1), "big", "x")
    kept.save()
    again = fuzz_corpus.Corpus.open(tmp_path)
    assert again.cases() == [("pte", b"abc", "mlp.pte")]
    assert again.signatures() == {"pte/execute/ok/"}


def test_signature_names_the_error_type_not_its_text():
    record = {"outcome": "untyped", "stage": "load_method", "detail": "ValueError: shape mismatch (2, 3)"}
    assert fuzz_corpus.signature("pte", record) == "pte/load_method/untyped/ValueError"


def test_byte_mutation_of_an_empty_file_makes_a_case():
    """A case truncated to nothing joins the corpus when it reaches new lines (an empty tokenizer.json did, in
    the seed-21 campaign); mutating it, with an empty file to splice from, stopped the campaign with
    ``ValueError: empty range for randrange()``."""
    import random

    from bench.fuzz import mutate

    rng = random.Random(0)
    cases = [mutate(b"", b"", rng) for _ in range(2000)]
    assert any(cases), "every mutation of an empty file came out empty"
