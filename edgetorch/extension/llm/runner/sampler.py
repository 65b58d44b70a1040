"""Next-token sampling from logits: greedy at temperature 0, else temperature with top-k and top-p. Torch-free."""

from __future__ import annotations

import numpy as np


class Sampler:
    """Picks a token id from a logits vector; ``seed`` makes sampling repeatable."""

    def __init__(self, temperature: float = 0.8, top_p: float = 0.9, top_k: int = 0, seed: int | None = None):
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.rng = np.random.default_rng(seed)

    def __call__(self, logits: np.ndarray) -> int:
        logits = np.asarray(logits, dtype=np.float64).reshape(-1)
        if self.temperature <= 0:
            return int(logits.argmax())
        logits = logits / self.temperature
        if 0 < self.top_k < logits.size:
            cutoff = np.partition(logits, -self.top_k)[-self.top_k]
            logits = np.where(logits < cutoff, -np.inf, logits)
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        if 0 < self.top_p < 1:
            order = np.argsort(-probs)
            cumulative = np.cumsum(probs[order])
            keep = order[: int(np.searchsorted(cumulative, self.top_p)) + 1]
            kept = np.zeros_like(probs)
            kept[keep] = probs[keep]
            probs = kept / kept.sum()
        return int(self.rng.choice(probs.size, p=probs))
