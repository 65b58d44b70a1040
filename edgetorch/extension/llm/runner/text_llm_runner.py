"""``TextLLMRunner``: tokenize, prefill the KV cache in one call, decode token by token, report stats.

The semantics are ExecuTorch's text runner's: the program's metadata methods say how long a prompt one
call may take (``get_max_seq_len``), how long the cache is (``get_max_context_len``), which ids end
generation (``get_eos_ids``); ``GenerationConfig`` says how many tokens to make. The cache position
carries over from one ``generate`` to the next (a conversation); ``reset`` starts again. Torch-free.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from edgetorch.errors import InvalidInputError
from edgetorch.extension.llm.runner.sampler import Sampler
from edgetorch.extension.llm.runner.stats import Stats, peak_rss_bytes, time_ms
from edgetorch.extension.llm.runner.tokenizer import Tokenizer, load_tokenizer


@dataclass
class GenerationConfig:
    """How to generate: ExecuTorch's fields, plus ``top_p``/``top_k`` and a sampling ``seed``.

    ``max_new_tokens`` and ``seq_len`` (total tokens) of -1 mean "up to the context length".
    """

    echo: bool = True
    max_new_tokens: int = -1
    warming: bool = False
    seq_len: int = -1
    temperature: float = 0.8
    top_p: float = 0.9
    top_k: int = 0
    num_bos: int = 0
    num_eos: int = 0
    seed: int | None = None

    def resolve_max_new_tokens(self, max_context_len: int, num_prompt_tokens: int) -> int:
        """How many tokens to generate after ``num_prompt_tokens``, within ``max_context_len``."""
        if self.seq_len == -1 and self.max_new_tokens == -1:
            result = max_context_len - num_prompt_tokens
        elif self.seq_len == -1:
            result = min(self.max_new_tokens, max_context_len - num_prompt_tokens)
        elif self.max_new_tokens == -1:
            result = min(self.seq_len, max_context_len) - num_prompt_tokens
        else:
            result = min(min(self.seq_len, max_context_len) - num_prompt_tokens, self.max_new_tokens)
        return max(0, result)


class TextLLMRunner:
    """Runs an LLM ``.pte`` (``forward(tokens, input_pos) -> logits``) with a tokenizer."""

    def __init__(
        self, model_path: str | Path, tokenizer: str | Path | Tokenizer, data_path: str | Path | None = None
    ) -> None:
        self.model_path = Path(model_path)
        self.data_path = None if data_path is None else Path(data_path)
        self.tokenizer = tokenizer if isinstance(tokenizer, Tokenizer) else load_tokenizer(tokenizer)
        self.metadata: dict[str, object] = {}
        self.stats = Stats()
        self._method = None
        self._pos = 0
        self._stop = threading.Event()

    def is_loaded(self) -> bool:
        return self._method is not None

    def load(self) -> None:
        """Load the program, its ``forward`` method and its metadata (idempotent)."""
        if self._method is not None:
            return
        from edgetorch.runtime import Runtime

        self.stats.model_load_start_ms = time_ms()
        data = [] if self.data_path is None else [self.data_path]
        program = Runtime.get().load_program(self.model_path, data_files=data)
        if "forward" not in program.method_names:
            raise InvalidInputError(f"{str(self.model_path)!r} has no 'forward' method; export it with export_llm")
        for name in program.method_names - {"forward"}:
            values = program.load_method(name).execute([])
            if values:
                value = values if name == "get_eos_ids" else values[0]
                self.metadata[name] = [int(v) for v in value] if name == "get_eos_ids" else _scalar(value)
        self._method = program.load_method("forward")
        meta = self.metadata
        meta.setdefault("get_max_seq_len", 128)
        meta.setdefault("get_max_context_len", meta["get_max_seq_len"])
        meta.setdefault("use_kv_cache", True)
        meta.setdefault("enable_dynamic_shape", False)
        if "get_eos_ids" not in meta:
            meta["get_eos_ids"] = list(self.tokenizer.eos_ids)
        if "get_bos_id" not in meta and self.tokenizer.bos_id is not None:
            meta["get_bos_id"] = self.tokenizer.bos_id
        self._prime()
        self.stats.model_load_end_ms = time_ms()

    def _prime(self) -> None:
        """Run ``forward`` once at one token and, when it takes prompts, once at a prompt longer than the
        integer GEMV takes, then return to position 0, so that loading the compiled kernels (numba's on-disk
        cache; compiling on a first run ever) is part of the load, not of the first prompt's evaluation. Both
        paths a layer can take are primed: the GEMV a decode step runs and the dequantize + sgemm a prompt
        runs. The cache rows written are overwritten by the next prompt (it starts at position 0) and masked
        until then, as after ``warmup``."""
        from edgetorch.runtime import policy

        token = int(self.metadata.get("get_bos_id", 0))
        lengths = [1]
        if self.metadata["enable_dynamic_shape"]:
            longest = int(self.metadata["get_max_seq_len"])
            lengths.append(min(longest, max(policy.current().gemv_max_rows.values(), default=0) + 1))
        for length in lengths:
            if length < int(self.metadata["get_max_context_len"]):
                self._forward([token] * length)
                self._pos = 0

    @property
    def eos_ids(self) -> set[int]:
        return set(self.metadata.get("get_eos_ids", [])) | set(self.tokenizer.eos_ids)

    def reset(self) -> None:
        """Forget the conversation: the next prompt starts at cache position 0."""
        self._pos = 0
        self._reset_stats()

    def _reset_stats(self) -> None:
        loaded = self.stats
        self.stats = Stats(model_load_start_ms=loaded.model_load_start_ms, model_load_end_ms=loaded.model_load_end_ms)

    def stop(self) -> None:
        """Ask a running ``generate`` (in another thread, or from a callback) to stop after the current token."""
        self._stop.set()

    def warmup(self, prompt: str = "Hello world", max_new_tokens: int = 10) -> None:
        """Run the whole pipeline once without output, then forget it (position and stats)."""
        pos = self._pos
        self.generate(prompt, GenerationConfig(echo=False, warming=True, max_new_tokens=max_new_tokens))
        self._pos = pos
        self._reset_stats()

    def generate(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        token_callback: Callable[[str], None] | None = None,
        stats_callback: Callable[[Stats], None] | None = None,
    ) -> str:
        """Generate text after ``prompt``; stream each piece to ``token_callback``; return the generated text."""
        config = config or GenerationConfig()
        self.load()
        start = time_ms()
        bos = self.metadata.get("get_bos_id")
        prompt_ids = self.tokenizer.encode(prompt)
        prompt_ids = [bos] * config.num_bos + prompt_ids if bos is not None else prompt_ids
        if config.num_eos and self.eos_ids:
            prompt_ids += [min(self.eos_ids)] * config.num_eos
        if config.echo and token_callback is not None and not config.warming:
            token_callback(prompt)
        generated: list[int] = []
        emitted = ""

        def on_token(token: int) -> None:
            nonlocal emitted
            generated.append(token)
            text = self.tokenizer.decode(generated)
            if not text.endswith("\ufffd"):  # wait for the rest of a multi-byte character
                if token_callback is not None and not config.warming:
                    token_callback(text[len(emitted) :])
                emitted = text

        self.generate_ids(prompt_ids, config, on_token, stats_callback, inference_start_ms=start)
        return emitted

    def generate_from_pos(
        self,
        prompt: str,
        start_pos: int,
        config: GenerationConfig | None = None,
        token_callback: Callable[[str], None] | None = None,
        stats_callback: Callable[[Stats], None] | None = None,
    ) -> str:
        """As :meth:`generate`, with the prompt written into the KV cache from position ``start_pos``: what the
        cache holds before it is kept (a conversation's earlier turns), what lies after it is overwritten."""
        self.load()
        context = int(self.metadata["get_max_context_len"])
        if isinstance(start_pos, bool) or not isinstance(start_pos, int) or not 0 <= start_pos < context:
            raise InvalidInputError(
                f"start_pos must be an int in [0, {context}) (the context length); got {start_pos!r}"
            )
        self._pos = start_pos
        return self.generate(prompt, config, token_callback, stats_callback)

    def generate_ids(
        self,
        prompt_ids: list[int],
        config: GenerationConfig | None = None,
        token_callback: Callable[[int], None] | None = None,
        stats_callback: Callable[[Stats], None] | None = None,
        inference_start_ms: float | None = None,
    ) -> list[int]:
        """Generate token ids after ``prompt_ids`` (the EOS that ends generation is included, not streamed)."""
        config = config or GenerationConfig()
        self.load()
        self._stop.clear()
        self._reset_stats()
        stats = self.stats
        stats.inference_start_ms = inference_start_ms if inference_start_ms is not None else time_ms()
        stats.token_encode_end_ms = time_ms()
        context = int(self.metadata["get_max_context_len"])
        if not prompt_ids:
            raise InvalidInputError("the prompt encodes to no tokens; pass a non-empty prompt")
        if self._pos + len(prompt_ids) >= context:
            raise InvalidInputError(
                f"the prompt ({len(prompt_ids)} tokens, after {self._pos} in the cache) does not fit the context "
                f"of {context} tokens; shorten it, call reset(), or export with a larger max_context_len"
            )
        budget = config.resolve_max_new_tokens(context - self._pos, len(prompt_ids))
        sampler = Sampler(config.temperature, config.top_p, config.top_k, config.seed)
        stats.num_prompt_tokens = len(prompt_ids)
        stats.model_execution_start_ms = time_ms()
        logits = self._prefill(list(prompt_ids))
        stats.prompt_eval_end_ms = time_ms()
        generated: list[int] = []
        eos = self.eos_ids
        while len(generated) < budget:
            start = time_ms()
            token = sampler(logits)
            stats.aggregate_sampling_time_ms += time_ms() - start
            generated.append(token)
            if len(generated) == 1:
                stats.first_token_ms = time_ms()
            if token in eos:
                break
            if token_callback is not None:
                token_callback(token)
            if self._stop.is_set() or len(generated) == budget:
                break
            logits = self._forward([token])
        stats.model_execution_end_ms = stats.inference_end_ms = time_ms()
        stats.num_generated_tokens = len(generated)
        stats.peak_rss_bytes = peak_rss_bytes()
        if stats_callback is not None:
            stats_callback(stats)
        return generated

    def _prefill(self, ids: list[int]) -> np.ndarray:
        """Feed the prompt: in chunks of ``get_max_seq_len`` when the program takes dynamic lengths, else one by one."""
        chunk = int(self.metadata["get_max_seq_len"]) if self.metadata["enable_dynamic_shape"] else 1
        logits = None
        for i in range(0, len(ids), chunk):
            logits = self._forward(ids[i : i + chunk])
        return logits

    def _forward(self, ids: list[int]) -> np.ndarray:
        tokens = np.asarray([ids], dtype=np.int64)
        if self.metadata["use_kv_cache"]:
            outputs = self._method.execute([tokens, np.asarray([self._pos], dtype=np.int64)])
        else:
            outputs = self._method.execute([tokens])
        self._pos += len(ids)
        logits = np.asarray(outputs[0])
        return logits.reshape(-1, logits.shape[-1])[-1]


def _scalar(value):
    value = value.item() if isinstance(value, np.generic | np.ndarray) else value
    return value


def create_text_llm_runner(
    model_path: str | Path, tokenizer: str | Path | Tokenizer, data_path: str | Path | None = None
) -> TextLLMRunner:
    """A loaded runner for the LLM ``.pte`` at ``model_path`` (with its ``.ptd`` weights at ``data_path``, if
    any) and the tokenizer at ``tokenizer``, as ExecuTorch's ``create_text_llm_runner``."""
    runner = TextLLMRunner(model_path, tokenizer, data_path)
    runner.load()
    return runner
