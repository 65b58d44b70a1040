"""The torch-free LLM text runner, as ExecuTorch's ``executorch.extension.llm.runner``.

``TextLLMRunner(model.pte, tokenizer).generate(prompt, GenerationConfig(...), token_callback=print)``
streams text; ``Stats`` holds the timings; ``load_tokenizer`` reads Hugging Face, SentencePiece, tiktoken
and GGUF vocabularies. Imports NumPy and edgetorch's runtime (tokenizer libraries lazily).
"""

from edgetorch.extension.llm.runner.sampler import Sampler
from edgetorch.extension.llm.runner.stats import Stats
from edgetorch.extension.llm.runner.text_llm_runner import GenerationConfig, TextLLMRunner, create_text_llm_runner
from edgetorch.extension.llm.runner.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "GenerationConfig",
    "Sampler",
    "Stats",
    "TextLLMRunner",
    "Tokenizer",
    "create_text_llm_runner",
    "load_tokenizer",
]
