"""The LLM tokenizers at ExecuTorch's path (``executorch.extension.llm.tokenizers``, whose Python package is
``pytorch_tokenizers``): ``get_tokenizer(path)`` reads a Hugging Face ``tokenizer.json``, a SentencePiece
model, a tiktoken file or a GGUF vocabulary. They live in ``extension.llm.runner.tokenizer``. Torch-free
(tokenizer libraries are imported lazily)."""

from edgetorch.extension.llm.runner.tokenizer import (
    GGUFTokenizer,
    HFTokenizer,
    SentencePieceTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    load_tokenizer,
)

get_tokenizer = load_tokenizer
HuggingFaceTokenizer = HFTokenizer

__all__ = [
    "GGUFTokenizer",
    "HFTokenizer",
    "HuggingFaceTokenizer",
    "SentencePieceTokenizer",
    "TiktokenTokenizer",
    "Tokenizer",
    "get_tokenizer",
    "load_tokenizer",
]
