"""The torch-free LLM text runner, as ExecuTorch's ``executorch.extension.llm.runner``.

``TextLLMRunner(model.pte, tokenizer).generate(prompt, GenerationConfig(...), token_callback=print)``
streams text; ``Stats`` holds the timings; ``load_tokenizer`` reads Hugging Face, SentencePiece, tiktoken
and GGUF vocabularies. ``MultimodalRunner`` takes ``MultimodalInput`` lists (``make_text_input``,
``make_token_input``, ``make_image_input``, ``make_audio_input``, ``make_raw_audio_input``) and drives
encoder-decoder speech programs (Whisper). Imports NumPy and edgetorch's runtime (tokenizer libraries lazily).
"""

from edgetorch.extension.llm.runner.multimodal_input import (
    Audio,
    Image,
    MultimodalInput,
    RawAudio,
    make_audio_input,
    make_image_input,
    make_raw_audio_input,
    make_text_input,
    make_token_input,
)
from edgetorch.extension.llm.runner.multimodal_runner import MultimodalRunner
from edgetorch.extension.llm.runner.sampler import Sampler
from edgetorch.extension.llm.runner.stats import Stats
from edgetorch.extension.llm.runner.text_llm_runner import GenerationConfig, TextLLMRunner, create_text_llm_runner
from edgetorch.extension.llm.runner.tokenizer import Tokenizer, load_tokenizer

__all__ = [
    "Audio",
    "GenerationConfig",
    "Image",
    "MultimodalInput",
    "MultimodalRunner",
    "RawAudio",
    "Sampler",
    "Stats",
    "TextLLMRunner",
    "Tokenizer",
    "create_text_llm_runner",
    "load_tokenizer",
    "make_audio_input",
    "make_image_input",
    "make_raw_audio_input",
    "make_text_input",
    "make_token_input",
]
