"""SentencePiece ``.model`` and tiktoken BPE files, built offline here: detected by ``load_tokenizer`` and by
the runner, encode/decode against the libraries' own answers, BOS/EOS ids as Llama 2/3 conventions have them."""

from __future__ import annotations

import base64
import collections

import pytest

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export import export_llm
from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner, load_tokenizer
from edgetorch.extension.llm.runner.tokenizer import SentencePieceTokenizer, TiktokenTokenizer
from tests.extension.llm.conftest import random_checkpoint

TEXT = (
    "the quick brown fox jumps over the lazy dog. the dog sleeps; the fox runs.\n"
    "a tokenizer turns text into tokens and tokens back into text.\n"
    "there are three thin things: the thread, the thorn and the theme.\n"
) * 20
N_MERGES = 40


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    """A 72-piece BPE SentencePiece model trained on TEXT (ids: unk 0, bos 1, eos 2)."""
    sentencepiece = pytest.importorskip("sentencepiece")
    folder = tmp_path_factory.mktemp("spm")
    (folder / "corpus.txt").write_text(TEXT)
    sentencepiece.SentencePieceTrainer.train(
        input=str(folder / "corpus.txt"),
        model_prefix=str(folder / "tokenizer"),
        vocab_size=72,
        model_type="bpe",
        character_coverage=1.0,
        minloglevel=2,
    )
    return folder / "tokenizer.model"


def _train_byte_bpe(text: str, merges: int) -> dict[bytes, int]:
    """tiktoken-style mergeable ranks: the 256 bytes, then the ``merges`` most frequent adjacent pairs in turn."""
    ranks = {bytes([b]): b for b in range(256)}
    words = [[bytes([b]) for b in word.encode()] for word in text.split(" ")]
    for _ in range(merges):
        pairs = collections.Counter((w[i], w[i + 1]) for w in words for i in range(len(w) - 1))
        (a, b), _count = pairs.most_common(1)[0]
        ranks[a + b] = len(ranks)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i : i + 2] = [a + b]
                i += 1
    return ranks


@pytest.fixture(scope="module")
def tiktoken_file(tmp_path_factory):
    """A tiktoken BPE file (``base64-token rank`` lines) with 256 bytes plus N_MERGES merges."""
    pytest.importorskip("tiktoken")
    ranks = _train_byte_bpe(TEXT, N_MERGES)
    path = tmp_path_factory.mktemp("tiktoken") / "tokenizer.model"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in ranks.items()))
    return path, ranks


def _program(folder, vocab_size: int):
    """A tiny exported model with the tokenizer's vocabulary size."""
    path = folder / "model.pte"
    checkpoint = random_checkpoint(seed=5, n_layers=1, vocab_size=vocab_size, max_seq_len=8, max_context_len=48)
    export_llm(checkpoint, path, max_seq_len=8, max_context_len=48)
    return path


def test_sentencepiece_model_is_detected_and_matches_sentencepiece(sentencepiece_model):
    import sentencepiece

    reference = sentencepiece.SentencePieceProcessor(model_file=str(sentencepiece_model))
    tok = load_tokenizer(sentencepiece_model)
    assert isinstance(tok, SentencePieceTokenizer)
    assert isinstance(load_tokenizer(sentencepiece_model.parent), SentencePieceTokenizer)  # a folder with it
    assert (tok.bos_id, tok.eos_ids, tok.vocab_size) == (1, [2], 72)
    text = "the fox turns three tokens"
    ids = tok.encode(text)
    assert ids[0] == 1 and ids[1:] == reference.encode(text)
    assert len(ids) < len(text)  # pieces longer than characters were learned
    assert tok.decode(ids[1:]) == text


def test_tiktoken_file_is_detected_with_llama3_specials(tiktoken_file):
    path, ranks = tiktoken_file
    tok = load_tokenizer(path)
    assert isinstance(tok, TiktokenTokenizer)
    n = len(ranks)
    assert tok.vocab_size == n + 256
    assert tok.bos_id == n and tok.eos_ids == [n + 9, n + 1]  # <|eot_id|>, <|end_of_text|>
    ids = tok.encode("the thread<|eot_id|>")
    assert ids[0] == n and ids[-1] == n + 9
    assert ranks[b"the"] in ids  # a learned merge is one token
    assert all(0 <= i < n for i in ids[1:-1])
    assert tok.decode(ids) == "<|begin_of_text|>the thread<|eot_id|>"
    assert tok.decode(tok.encode("fox jumps, dog sleeps")[1:]) == "fox jumps, dog sleeps"


def test_runner_detects_the_tokenizer_file(sentencepiece_model, tiktoken_file, tmp_path):
    assert isinstance(TextLLMRunner(tmp_path / "unused.pte", sentencepiece_model).tokenizer, SentencePieceTokenizer)
    path = tiktoken_file[0]
    runner = TextLLMRunner(_program(tmp_path, load_tokenizer(path).vocab_size), path)
    assert isinstance(runner.tokenizer, TiktokenTokenizer)
    runner.load()
    runner.metadata["get_eos_ids"], runner.tokenizer.eos_ids = [], []  # always make 6 tokens
    pieces: list[str] = []
    config = GenerationConfig(temperature=0, echo=False, max_new_tokens=6)
    text = runner.generate("the fox", config, token_callback=pieces.append)
    assert runner.stats.num_prompt_tokens == len(runner.tokenizer.encode("the fox"))
    assert runner.stats.num_generated_tokens == 6 and "".join(pieces) == text


def test_sentencepiece_decode_of_an_unknown_id_is_a_typed_error(sentencepiece_model):
    with pytest.raises(InvalidInputError, match="vocabulary"):
        load_tokenizer(sentencepiece_model).decode([5, 500])
