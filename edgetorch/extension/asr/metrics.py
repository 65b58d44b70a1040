"""Word error rate: how far a transcript is from the text spoken. Standard library only."""

from __future__ import annotations

import re

__all__ = ["normalize", "word_error_rate"]


def normalize(text: str) -> list[str]:
    """The words of ``text`` in lower case, punctuation dropped (apostrophes inside words kept)."""
    return re.findall(r"[a-z0-9]+(?:'[a-z0-9]+)*", text.lower())


def word_error_rate(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / reference words, after :func:`normalize` of both."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    previous = list(range(len(hyp) + 1))  # edit distances of the empty reference prefix
    for i, word in enumerate(ref, 1):
        current = [i]
        for j, other in enumerate(hyp, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other)))
        previous = current
    return previous[-1] / max(1, len(ref))
