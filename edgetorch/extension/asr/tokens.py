"""Whisper's special tokens, read from a Hugging Face ``tokenizer.json``. Standard library only."""

from __future__ import annotations

import json
from pathlib import Path

from edgetorch.errors import InvalidInputError

__all__ = ["special_ids"]

REQUIRED = ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>")


def special_ids(tokenizer_json: str | Path) -> dict[str, int]:
    """The added (special) tokens of ``tokenizer_json`` by text; refuses a file without Whisper's own."""
    path = Path(tokenizer_json)
    try:
        added = json.loads(path.read_text())["added_tokens"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise InvalidInputError(
            f"could not read the added tokens of {str(path)!r} ({e}); pass the tokenizer.json shipped with the "
            "Whisper model"
        ) from None
    ids = {token["content"]: int(token["id"]) for token in added}
    missing = [t for t in REQUIRED if t not in ids]
    if missing:
        raise InvalidInputError(f"{str(path)!r} has no {missing}; expected a Whisper tokenizer.json")
    return ids
