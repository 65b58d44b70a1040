"""``Stats``: the timings ExecuTorch's LLM runner reports, with its ``PyTorchObserver`` line and text report."""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import asdict, dataclass


def time_ms() -> float:
    """A monotonic clock in milliseconds."""
    return time.monotonic() * 1000.0


def peak_rss_bytes() -> int:
    """The process's peak resident set size so far."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def rss_bytes() -> int:
    """The process's current resident set size (Linux), or its peak elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return peak_rss_bytes()


@dataclass
class Stats:
    """One generation's timings in milliseconds (monotonic clock), as ExecuTorch's runner keeps them."""

    SCALING_FACTOR_UNITS_PER_SECOND = 1000
    model_load_start_ms: float = 0.0
    model_load_end_ms: float = 0.0
    inference_start_ms: float = 0.0
    token_encode_end_ms: float = 0.0
    model_execution_start_ms: float = 0.0
    model_execution_end_ms: float = 0.0
    prompt_eval_end_ms: float = 0.0
    first_token_ms: float = 0.0
    inference_end_ms: float = 0.0
    aggregate_sampling_time_ms: float = 0.0
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    peak_rss_bytes: int = 0

    @property
    def model_load_s(self) -> float:
        return (self.model_load_end_ms - self.model_load_start_ms) / 1000

    @property
    def time_to_first_token_s(self) -> float:
        return (self.first_token_ms - self.inference_start_ms) / 1000

    @property
    def prefill_tokens_per_s(self) -> float:
        seconds = (self.prompt_eval_end_ms - self.inference_start_ms) / 1000
        return self.num_prompt_tokens / seconds if seconds > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        # The first generated token comes out of the prefill; the decode loop makes the rest.
        seconds = (self.inference_end_ms - self.prompt_eval_end_ms) / 1000
        return (self.num_generated_tokens - 1) / seconds if seconds > 0 and self.num_generated_tokens > 1 else 0.0

    def to_json(self) -> str:
        """The ``PyTorchObserver {...}`` line ExecuTorch's runner prints."""
        fields = {
            "prompt_tokens": self.num_prompt_tokens,
            "generated_tokens": self.num_generated_tokens,
            "model_load_start_ms": round(self.model_load_start_ms),
            "model_load_end_ms": round(self.model_load_end_ms),
            "inference_start_ms": round(self.inference_start_ms),
            "inference_end_ms": round(self.inference_end_ms),
            "prompt_eval_end_ms": round(self.prompt_eval_end_ms),
            "first_token_ms": round(self.first_token_ms),
            "aggregate_sampling_time_ms": round(self.aggregate_sampling_time_ms),
            "SCALING_FACTOR_UNITS_PER_SECOND": self.SCALING_FACTOR_UNITS_PER_SECOND,
        }
        return "PyTorchObserver " + json.dumps(fields, separators=(",", ":"))

    def report(self) -> str:
        """The human-readable report (seconds and tokens/second)."""
        inference = (self.inference_end_ms - self.inference_start_ms) / 1000
        prompt = (self.prompt_eval_end_ms - self.inference_start_ms) / 1000
        generated = (self.inference_end_ms - self.prompt_eval_end_ms) / 1000
        rate = self.num_generated_tokens / inference if inference > 0 else 0.0
        lines = [
            f"Prompt Tokens: {self.num_prompt_tokens}    Generated Tokens: {self.num_generated_tokens}",
            f"\tModel Load Time:\t\t{self.model_load_s:.3f} (seconds)",
            f"\tTotal inference time:\t\t{inference:.3f} (seconds)\t\t Rate: \t{rate:.2f} (tokens/second)",
            f"\t\tPrompt evaluation:\t{prompt:.3f} (seconds)\t\t Rate: \t{self.prefill_tokens_per_s:.2f} (tokens/second)",
            f"\t\tGenerated {self.num_generated_tokens} tokens:\t{generated:.3f} (seconds)\t\t Rate: \t"
            f"{self.decode_tokens_per_s:.2f} (tokens/second)",
            f"\tTime to first generated token:\t{self.time_to_first_token_s:.3f} (seconds)",
            f"\tSampling time over {self.num_prompt_tokens + self.num_generated_tokens} tokens:\t"
            f"{self.aggregate_sampling_time_ms / 1000:.3f} (seconds)",
            f"\tPeak RSS:\t\t\t{self.peak_rss_bytes / 2**20:.1f} MiB",
        ]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return asdict(self)
