"""Contextualizers: a short "where this comes from" prefix for each chunk.

The prefix goes in front of the chunk for embedding and BM25; the raw chunk
text stays separate for display and citation. A contextualizer is pluggable
(`make_contextualizer`); whatever it writes is cut to the token reserve the
chunker left for it, so the model never truncates silently.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Protocol

from tokenizers import Tokenizer

from transforms.records import Chunk
from transforms.model.tokens import count_tokens, truncate_to_tokens

SEPARATOR = " › "


class Contextualizer(Protocol):
    version: str

    def contexts(self, chunks: list[Chunk]) -> list[str]: ...


class TitlePathContextualizer:
    """"<title> › <section path>", deterministic."""
    version = "title_path:1"

    def contexts(self, chunks: list[Chunk]) -> list[str]:
        out = []
        for c in chunks:
            parts = [c.title.strip()] if c.title.strip() else []
            for heading in c.heading_path:
                heading = heading.strip()
                if heading and (not parts or heading != parts[-1]):
                    parts.append(heading)
            out.append(SEPARATOR.join(parts))
        return out


class NoContextualizer:
    version = "none:1"

    def contexts(self, chunks: list[Chunk]) -> list[str]:
        return ["" for _ in chunks]


_KINDS: dict[str, Callable[[], Contextualizer]] = {
    "title_path": TitlePathContextualizer,
    "none": NoContextualizer,
}


def make_contextualizer(kind: str) -> Contextualizer:
    if kind not in _KINDS:
        raise ValueError(f"contextualize.kind: unknown contextualizer {kind!r}; expected one of {sorted(_KINDS)}")
    return _KINDS[kind]()


def contextualize(chunks: list[Chunk], contextualizer: Contextualizer, tokenizer: Tokenizer,
                  max_context_tokens: int) -> list[Chunk]:
    """Chunks with `context` filled, each context cut to the reserved token budget."""
    contexts = contextualizer.contexts(chunks)
    counts = count_tokens(tokenizer, contexts)
    out = []
    for chunk, ctx, n in zip(chunks, contexts, counts):
        if n > max_context_tokens:
            ctx = truncate_to_tokens(tokenizer, ctx, max_context_tokens)
        out.append(dataclasses.replace(chunk, context=ctx, n_tokens=chunk.n_tokens + min(n, max_context_tokens)))
    return out


# --- Beam wrapper -------------------------------------------------------------------

import apache_beam as beam  # noqa: E402


class ContextualizeFn(beam.DoFn):
    """One document's list of Chunks -> each Chunk with its context prefix."""

    def __init__(self, kind: str, max_context_tokens: int, tokenizer_path: str | None = None):
        self.kind = kind
        self.max_context_tokens = max_context_tokens
        self.tokenizer_path = tokenizer_path

    def setup(self):
        from transforms.model.tokens import load_tokenizer
        self.tokenizer = load_tokenizer(self.tokenizer_path)
        self.contextualizer = make_contextualizer(self.kind)

    def process(self, chunks: list[Chunk]):
        yield from contextualize(chunks, self.contextualizer, self.tokenizer, self.max_context_tokens)
