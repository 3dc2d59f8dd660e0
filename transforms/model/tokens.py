"""The embedding model's own tokenizer, for budgeting chunks in model tokens.

Counting with the model's word pieces (not words or characters) is what
guarantees that a chunk plus its context prefix is never silently truncated.
"""
from __future__ import annotations

import functools
from pathlib import Path

from tokenizers import Tokenizer

SPECIAL_TOKENS = 2  # [CLS] ... [SEP]


# Shipped with the package (see model_files/README.md), pinned like the model file.
DEFAULT_TOKENIZER = Path(__file__).parent / "model_files" / "all-MiniLM-L6-v2.tokenizer.json"
DEFAULT_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"


def default_tokenizer_path() -> Path:
    return DEFAULT_TOKENIZER


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: str | None = None) -> Tokenizer:
    tok = Tokenizer.from_file(str(path or default_tokenizer_path()))
    tok.no_truncation()
    tok.no_padding()
    return tok


def count_tokens(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    """Word pieces per text, without special tokens."""
    if not texts:
        return []
    encs = tokenizer.encode_batch(texts, add_special_tokens=False)
    return [len(e.ids) for e in encs]


def truncate_to_tokens(tokenizer: Tokenizer, text: str, max_tokens: int) -> str:
    """The longest prefix of `text` (cut at a word-piece boundary) within max_tokens."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    if len(enc.ids) <= max_tokens:
        return text
    if max_tokens <= 0:
        return ""
    end = enc.offsets[max_tokens - 1][1]
    return text[:end]
