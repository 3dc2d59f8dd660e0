"""What the embedding model reads of a chunk (words and stopwords: words.py; sentences: sentences.py)."""
from __future__ import annotations


def embedding_text(context: str, text: str) -> str:
    """What the model embeds for a chunk: its context line, then its text."""
    return f"{context}\n{text}" if context else text
