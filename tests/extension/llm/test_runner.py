"""TextLLMRunner on a tiny exported model: greedy text equals eager greedy decoding; stats, stop, limits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.export import build_model, export_llm
from edgetorch.extension.llm.runner import GenerationConfig, Sampler, TextLLMRunner, load_tokenizer
from tests.extension.llm.conftest import random_checkpoint

WORDS = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(97)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny exported model (vocab 100, context 32) and a word-level tokenizer for it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    folder = tmp_path_factory.mktemp("tiny-llm")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "add_bos_token": True,
        "chat_template": "{{ messages[0]['content'] }}",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    checkpoint = random_checkpoint(seed=3, max_seq_len=8, max_context_len=32)
    export_llm(checkpoint, folder / "model.pte", max_seq_len=8, max_context_len=32)
    return folder, checkpoint


def _eager_greedy(checkpoint, ids: list[int], budget: int) -> list[int]:
    model = build_model(checkpoint)
    out: list[int] = []
    with torch.no_grad():
        pos = 0
        for i in range(0, len(ids), 8):  # the runner's chunked prefill
            logits = model(torch.tensor([ids[i : i + 8]]), torch.tensor([pos]))
            pos += len(ids[i : i + 8])
        while len(out) < budget:
            token = int(logits.argmax())
            out.append(token)
            if token == 2 or len(out) == budget:
                break
            logits = model(torch.tensor([[token]]), torch.tensor([pos]))
            pos += 1
    return out


@pytest.mark.parametrize("prompt_words", [3, 11])
def test_greedy_generation_matches_eager(tiny, prompt_words):
    folder, checkpoint = tiny
    runner = TextLLMRunner(folder / "model.pte", folder / "tokenizer.json")
    prompt = " ".join(f"w{i * 7 % 97}" for i in range(prompt_words))
    pieces, seen = [], []
    text = runner.generate(
        prompt,
        GenerationConfig(temperature=0, max_new_tokens=12),
        token_callback=pieces.append,
        stats_callback=seen.append,
    )
    ids = runner.tokenizer.encode(prompt)
    assert ids[0] == 1  # add_bos_token
    expected = _eager_greedy(checkpoint, ids, 12)
    expected_text = runner.tokenizer.decode([t for t in expected if t != 2])
    assert text == expected_text
    assert "".join(pieces) == prompt + expected_text  # echo, then the stream
    stats = seen[0]
    assert stats.num_prompt_tokens == len(ids) and stats.num_generated_tokens == len(expected)
    assert stats.inference_start_ms <= stats.prompt_eval_end_ms <= stats.first_token_ms <= stats.inference_end_ms
    assert stats.peak_rss_bytes > 0 and stats.to_json().startswith("PyTorchObserver {")
    assert "Time to first generated token" in stats.report()


def test_load_primes_without_changing_results(tiny, monkeypatch):
    """load() runs forward at one token and at a full prompt (so the first prompt does not load kernels), then
    is back at position 0: a prompt's logits are those of a runner that skipped the priming."""
    folder, _ = tiny
    calls: list[int] = []
    primed = TextLLMRunner(folder / "model.pte", folder / "tokenizer.json")
    forward = primed._forward
    monkeypatch.setattr(primed, "_forward", lambda ids: calls.append(len(ids)) or forward(ids))
    primed.load()
    assert calls == [1, 8] and primed._pos == 0  # max_seq_len 8 caps the prompt-length pass
    monkeypatch.undo()
    plain = TextLLMRunner(folder / "model.pte", folder / "tokenizer.json")
    monkeypatch.setattr(TextLLMRunner, "_prime", lambda self: None)
    plain.load()
    ids = [1, 9, 30, 4, 77, 12]
    np.testing.assert_array_equal(primed._prefill(ids), plain._prefill(ids))
    np.testing.assert_array_equal(primed._forward([5]), plain._forward([5]))


def test_metadata_and_limits(tiny):
    folder, _ = tiny
    runner = TextLLMRunner(folder / "model.pte", folder / "tokenizer.json")
    runner.load()
    assert runner.metadata["get_max_context_len"] == 32 and runner.metadata["get_eos_ids"] == [2]
    long_prompt = " ".join(["w5"] * 40)
    with pytest.raises(InvalidInputError, match="does not fit the context"):
        runner.generate(long_prompt, GenerationConfig(temperature=0))
    # A generation without a limit stops at the context length, never beyond it.
    text = runner.generate("w1 w2", GenerationConfig(temperature=0, echo=False))
    assert runner._pos <= 32 and len(runner.tokenizer.encode(text)) <= 32
    runner.reset()
    assert runner._pos == 0


def test_stop_from_callback(tiny):
    folder, _ = tiny
    runner = TextLLMRunner(folder / "model.pte", folder / "tokenizer.json")
    pieces: list[str] = []

    def callback(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 3:
            runner.stop()

    runner.generate("w9 w8", GenerationConfig(temperature=0, echo=False, max_new_tokens=20), token_callback=callback)
    assert runner.stats.num_generated_tokens <= 3


@pytest.mark.parametrize(
    "max_new, seq_len, expected",
    [(-1, -1, 22), (5, -1, 5), (50, -1, 22), (-1, 20, 10), (4, 20, 4), (-1, 8, 0)],
)
def test_resolve_max_new_tokens(max_new, seq_len, expected):
    config = GenerationConfig(max_new_tokens=max_new, seq_len=seq_len)
    assert config.resolve_max_new_tokens(32, 10) == expected


def test_sampler():
    logits = np.array([0.1, 3.0, 0.2, 2.9, -1.0])
    assert Sampler(temperature=0)(logits) == 1
    assert all(Sampler(temperature=1.0, top_k=1, seed=s)(logits) == 1 for s in range(5))
    draws = [Sampler(temperature=1.0, top_p=0.9, seed=s)(logits) for s in range(40)]
    assert set(draws) <= {1, 3} and len(set(draws)) == 2  # the nucleus is the two large logits
    assert [Sampler(0.7, seed=4)(logits) for _ in range(3)] == [Sampler(0.7, seed=4)(logits) for _ in range(3)]


def test_chat_template_and_tokenizer_detection(tiny, tmp_path):
    folder, _ = tiny
    tok = load_tokenizer(folder)
    assert tok.apply_chat_template([{"role": "user", "content": "w3 w4"}]) == "w3 w4"
    (tmp_path / "bad.bin").write_bytes(b"\x00\x01garbage")
    with pytest.raises(InvalidInputError, match="could not read"):
        load_tokenizer(tmp_path / "bad.bin")


def test_runner_imports_without_torch(tiny):
    """The runner, tokenizer and runtime work in a process where importing torch fails."""
    folder, _ = tiny
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        from edgetorch.extension.llm.runner import GenerationConfig, TextLLMRunner
        runner = TextLLMRunner({str(folder / "model.pte")!r}, {str(folder / "tokenizer.json")!r})
        print(runner.generate("w1 w2", GenerationConfig(temperature=0, echo=False, max_new_tokens=4)))
        assert not any(name == "torch" or name.startswith("torch.") for name in sys.modules if sys.modules[name])
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
