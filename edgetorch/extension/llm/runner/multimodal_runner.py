"""``MultimodalRunner``: ExecuTorch's runner for programs that take images or audio as well as text. Torch-free.

A program says what it is by its method names (ExecuTorch's conventions): ``audio_encoder`` and
``image_encoder`` turn media into the decoder's inputs, ``token_embeddings`` turns token ids into embeddings,
``text_decoder`` makes the next token's logits. This runner drives encoder–decoder speech programs, Whisper
as ``edgetorch asr export`` writes it (``audio_encoder``, ``cross_kv``, ``text_decoder``): the audio input
(features or raw samples) is encoded once, token inputs become the decoder prompt (Whisper's start tokens
when there are none), and decoding is Whisper's greedy rule up to ``config.max_new_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.runner.multimodal_input import MultimodalInput
from edgetorch.extension.llm.runner.stats import Stats, peak_rss_bytes, time_ms
from edgetorch.extension.llm.runner.text_llm_runner import GenerationConfig

if TYPE_CHECKING:
    from edgetorch.extension.asr.runner import AsrRunner

__all__ = ["MultimodalRunner"]

ENCODER_DECODER_METHODS = ("audio_encoder", "cross_kv", "text_decoder")


class MultimodalRunner:
    """Generates text from a list of :class:`MultimodalInput` with a multimodal ``.pte`` and its tokenizer."""

    def __init__(self, model_path: str | Path, tokenizer_path: str | Path, data_path: str | Path | None = None):
        if data_path is not None:
            raise InvalidInputError(
                "MultimodalRunner takes the weights inside the .pte; found a separate data file, export without one"
            )
        self.model_path = Path(model_path)
        self.tokenizer_path = Path(tokenizer_path)
        self.stats = Stats()
        self._speech: AsrRunner | None = None

    def load(self) -> None:
        """Load the program and check that it is a kind this runner drives (idempotent)."""
        if self._speech is not None:
            return
        from edgetorch.extension.asr.runner import AsrRunner
        from edgetorch.runtime import Runtime

        self.stats.model_load_start_ms = time_ms()
        names = Runtime.get().load_program(self.model_path).method_names
        if not set(ENCODER_DECODER_METHODS) <= names:
            raise InvalidInputError(
                f"{str(self.model_path)!r} has methods {sorted(names)}; this runner drives encoder-decoder speech "
                f"programs with {list(ENCODER_DECODER_METHODS)} (from `edgetorch asr export`)"
            )
        speech = AsrRunner(self.model_path, self.tokenizer_path)
        speech.load()
        self._speech = speech
        self.stats.model_load_end_ms = time_ms()

    def get_vocab_size(self) -> int:
        self.load()
        assert self._speech is not None
        return self._speech.metadata["get_vocab_size"][0]

    def reset(self) -> None:
        """Forget the last generation's statistics (each generation starts its KV cache at position 0)."""
        self.stats = Stats(
            model_load_start_ms=self.stats.model_load_start_ms, model_load_end_ms=self.stats.model_load_end_ms
        )

    def _features(self, inputs: list[MultimodalInput]) -> tuple[np.ndarray, list[int] | None]:
        speech = self._speech
        assert speech is not None
        media = [i for i in inputs if i.is_audio() or i.is_raw_audio()]
        if len(media) != 1 or any(i.is_image() or i.is_text() for i in inputs):
            kinds = [type(i.value).__name__ for i in inputs]
            raise InvalidInputError(
                f"a speech program takes one audio input (make_audio_input or make_raw_audio_input) and optional "
                f"token inputs for the decoder prompt; found {kinds}"
            )
        prompt = [t for i in inputs if i.is_tokens() for t in (i.get_tokens() or [])] or None
        audio = media[0].get_audio()
        if audio is not None:
            expected = (1, speech.metadata.get("get_n_mels", [80])[0], 3000)
            if audio.data.shape != expected:
                raise InvalidInputError(
                    f"expected audio features of shape {list(expected)} (Whisper's 30 s of log-mel frames); found "
                    f"{list(audio.data.shape)}"
                )
            return audio.data, prompt
        raw = media[0].get_raw_audio()
        assert raw is not None
        if raw.batch_size != 1:
            raise InvalidInputError(f"expected one clip of raw audio (batch 1); found a batch of {raw.batch_size}")
        return speech.features(raw.data[0].mean(axis=0), raw.sample_rate), prompt

    def generate(
        self,
        inputs: list[MultimodalInput],
        config: GenerationConfig | None = None,
        token_callback: Callable[[str], None] | None = None,
        stats_callback: Callable[[Stats], None] | None = None,
    ) -> None:
        """Stream the text generated for ``inputs`` to ``token_callback``; ``stats_callback`` gets the timings."""
        self.load()
        speech = self._speech
        assert speech is not None
        config = config or GenerationConfig()
        self.reset()
        stats = self.stats
        stats.inference_start_ms = time_ms()
        mel, prompt = self._features(inputs)
        stats.token_encode_end_ms = stats.model_execution_start_ms = time_ms()
        cross = speech.encode(mel)
        stats.prompt_eval_end_ms = time_ms()

        def on_token(piece: str) -> None:
            if not stats.first_token_ms:
                stats.first_token_ms = time_ms()
            if token_callback is not None:
                token_callback(piece)

        generated = speech.decode(cross, prompt, config.max_new_tokens, on_token)
        stats.model_execution_end_ms = stats.inference_end_ms = time_ms()
        stats.num_prompt_tokens = speech.stats.num_prompt_tokens
        stats.num_generated_tokens = len(generated)
        stats.peak_rss_bytes = peak_rss_bytes()
        if stats_callback is not None:
            stats_callback(stats)

    def generate_text(self, inputs: list[MultimodalInput], config: GenerationConfig | None = None) -> str:
        """The whole text generated for ``inputs``."""
        pieces: list[str] = []
        self.generate(inputs, config, token_callback=pieces.append)
        return "".join(pieces)
