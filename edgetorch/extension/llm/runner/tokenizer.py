"""Tokenizers for the text runner, detected from the file: Hugging Face ``tokenizer.json``, SentencePiece
``.model``, tiktoken BPE files, and the vocabulary embedded in a GGUF file.

Each is a :class:`Tokenizer` with ``encode``, ``decode``, ``bos_id``, ``eos_ids`` and an optional chat
template. The tokenizer libraries (``tokenizers``, ``sentencepiece``, ``tiktoken``, ``gguf``) are imported
only when a file needs them. Torch-free.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from edgetorch.errors import InvalidInputError

__all__ = ["Tokenizer", "load_tokenizer"]


class Tokenizer:
    """Text <-> token ids. ``encode`` adds what the tokenizer's own config asks for (a BOS, usually)."""

    bos_id: int | None = None
    eos_ids: list[int] = []
    chat_template: str | None = None
    vocab_size: int = 0

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """The prompt for ``messages`` ([{"role", "content"}]) rendered with the tokenizer's chat template."""
        if not self.chat_template:
            raise InvalidInputError("this tokenizer has no chat template; pass the prompt without --chat")
        try:
            import jinja2
        except ImportError:  # pragma: no cover - jinja2 ships with transformers
            raise InvalidInputError("chat templates need the jinja2 package: pip install jinja2") from None
        environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        template = environment.from_string(self.chat_template)
        bos = self.decode([self.bos_id]) if self.bos_id is not None else ""
        eos = self.decode(self.eos_ids[:1]) if self.eos_ids else ""
        return template.render(messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos)


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizer.json`` (with ``tokenizer_config.json`` beside it for bos/eos/chat template)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as _Tokenizer

        try:
            self._tok = _Tokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception for malformed files
            raise InvalidInputError(
                f"{str(path)!r} is not a valid Hugging Face tokenizer.json ({e}); pass the tokenizer.json "
                "that ships with the model"
            ) from None
        self.vocab_size = self._tok.get_vocab_size()
        config_path = path.with_name("tokenizer_config.json")
        config = json.loads(config_path.read_text()) if config_path.exists() else {}
        self.chat_template = config.get("chat_template")
        self.add_bos = bool(config.get("add_bos_token", False))
        self.bos_id = self._token_id(config.get("bos_token"))
        eos = self._token_id(config.get("eos_token"))
        self.eos_ids = [eos] if eos is not None else []

    def _token_id(self, token) -> int | None:
        if isinstance(token, dict):
            token = token.get("content")
        return None if token is None else self._tok.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=True).ids
        if self.add_bos and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)


class SentencePieceTokenizer(Tokenizer):
    """A SentencePiece ``tokenizer.model`` (Llama 2 style: BOS prepended)."""

    def __init__(self, path: Path) -> None:
        import sentencepiece

        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self.vocab_size = self._sp.vocab_size()
        self.bos_id = self._sp.bos_id() if self._sp.bos_id() >= 0 else None
        self.eos_ids = [self._sp.eos_id()] if self._sp.eos_id() >= 0 else []

    def encode(self, text: str) -> list[int]:
        ids = self._sp.encode(text)
        return [self.bos_id, *ids] if self.bos_id is not None else ids

    def decode(self, ids: list[int]) -> str:
        try:
            return self._sp.decode(list(ids))
        except IndexError:  # sentencepiece's message for an id outside the vocabulary
            raise InvalidInputError(
                f"token ids {[i for i in ids if not 0 <= i < self.vocab_size][:5]} are outside the SentencePiece "
                f"vocabulary of {self.vocab_size}; use the tokenizer the model was trained with"
            ) from None


# Llama 3's split pattern and special tokens, the conventions of a tiktoken ``tokenizer.model``.
_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
    r"|\s+(?!\S)|\s+"
)
_LLAMA3_SPECIAL = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
    "<|eot_id|>", "<|python_tag|>",
]  # fmt: skip


class TiktokenTokenizer(Tokenizer):
    """A tiktoken BPE file (``base64-token rank`` per line), with Llama 3's pattern and special tokens."""

    def __init__(self, path: Path, ranks: dict[bytes, int]) -> None:
        import tiktoken

        specials = _LLAMA3_SPECIAL + [
            f"<|reserved_special_token_{i}|>" for i in range(2, 256 - len(_LLAMA3_SPECIAL) + 2)
        ]
        special_ids = {token: len(ranks) + i for i, token in enumerate(specials)}
        self._enc = tiktoken.Encoding(
            path.name, pat_str=_LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=special_ids
        )
        self.vocab_size = len(ranks) + len(specials)
        self.bos_id = special_ids["<|begin_of_text|>"]
        self.eos_ids = [special_ids["<|eot_id|>"], special_ids["<|end_of_text|>"]]

    def encode(self, text: str) -> list[int]:
        return [self.bos_id, *self._enc.encode(text, allowed_special="all")]

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(list(ids))


class GGUFTokenizer(Tokenizer):
    """The byte-level BPE vocabulary a GGUF file embeds (``tokenizer.ggml.model == "gpt2"``)."""

    def __init__(self, path: Path) -> None:
        from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as _Tokenizer

        from edgetorch.extension.llm.runner.gguf_reader import GGUFFile

        field = GGUFFile(path).metadata.get

        kind = field("tokenizer.ggml.model")
        if kind != "gpt2":
            raise InvalidInputError(
                f"the GGUF vocabulary is of type {kind!r}; only byte-level BPE ('gpt2') is read from GGUF. "
                "Pass the model's tokenizer.json or tokenizer.model instead"
            )
        tokens, merge_list = field("tokenizer.ggml.tokens"), field("tokenizer.ggml.merges")
        types = field("tokenizer.ggml.token_type") or [1] * len(tokens or [])
        for key, value, kind in (("tokens", tokens, str), ("merges", merge_list, str), ("token_type", types, int)):
            if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
                raise InvalidInputError(
                    f"the GGUF file's tokenizer.ggml.{key} must be a list of {kind.__name__}, found "
                    f"{type(value).__name__}; the file is corrupt or holds no vocabulary"
                )
        merges = [tuple(m.split(" ", 1)) for m in merge_list]
        if any(len(m) != 2 for m in merges):
            raise InvalidInputError("a GGUF BPE merge must be two tokens separated by a space; the file is corrupt")
        try:
            bpe = models.BPE({t: i for i, t in enumerate(tokens)}, merges, ignore_merges=False)
        except Exception as e:  # the tokenizers library raises a bare Exception for an inconsistent vocabulary
            raise InvalidInputError(
                f"the GGUF file's BPE vocabulary is inconsistent ({e}); the file is corrupt"
            ) from None
        tok = _Tokenizer(bpe)
        steps = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        if field("tokenizer.ggml.pre") in ("smollm", "qwen2", "llama-bpe"):
            steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
        if field("tokenizer.ggml.pre") == "qwen2":
            steps[0] = pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated")
        tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
        self._tok = tok
        self.vocab_size = len(tokens)
        self.bos_id = field("tokenizer.ggml.bos_token_id")
        self.add_bos = bool(field("tokenizer.ggml.add_bos_token", False))
        eos = field("tokenizer.ggml.eos_token_id")
        self.eos_ids = [eos] if eos is not None else []
        self.chat_template = field("tokenizer.chat_template")

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return [self.bos_id, *ids] if self.add_bos and self.bos_id is not None else ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)


def _tiktoken_ranks(path: Path) -> dict[bytes, int] | None:
    """The ranks of a tiktoken file, or None when ``path`` is not one."""
    try:
        ranks = {}
        with path.open("rb") as f:
            for line in f:
                if line.strip():
                    token, rank = line.split()
                    ranks[base64.b64decode(token, validate=True)] = int(rank)
        return ranks or None
    except (ValueError, UnicodeDecodeError):
        return None


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer stored at ``path``: a file, or a folder holding ``tokenizer.json`` or ``tokenizer.model``.

    Detection tries, in order: Hugging Face JSON, GGUF, tiktoken, SentencePiece.
    """
    path = Path(path)
    if path.is_dir():
        for name in ("tokenizer.json", "tokenizer.model"):
            if (path / name).exists():
                return load_tokenizer(path / name)
        raise InvalidInputError(f"{str(path)!r} holds no tokenizer.json or tokenizer.model; pass the file itself")
    if not path.is_file():
        raise InvalidInputError(f"tokenizer file {str(path)!r} does not exist")
    with path.open("rb") as f:
        head = f.read(4)
    if head == b"GGUF":
        return GGUFTokenizer(path)
    if head.lstrip()[:1] == b"{":
        return HFTokenizer(path)
    ranks = _tiktoken_ranks(path)
    if ranks is not None:
        return TiktokenTokenizer(path, ranks)
    try:
        return SentencePieceTokenizer(path)
    except (RuntimeError, OSError) as e:
        raise InvalidInputError(
            f"could not read {str(path)!r} as a Hugging Face tokenizer.json, GGUF, tiktoken or SentencePiece "
            f"tokenizer ({e}); pass one of those"
        ) from None
