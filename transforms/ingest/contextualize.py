"""Contextualizers: a short "where this comes from" prefix for each chunk.

The prefix goes in front of the chunk for embedding and BM25; the raw chunk
text stays separate for display and citation. A contextualizer is pluggable
(`make_contextualizer`); whatever it writes is cut to the token reserve the
chunker left for it, so the model never truncates silently.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Protocol

import apache_beam as beam
from tokenizers import Tokenizer

from transforms.common.stage import Outputs, StageFn
from transforms.model.tokens import count_tokens, load_tokenizer, truncate_to_tokens
from transforms.records import Chunk

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


# --- the contextualize stage in Beam ------------------------------------------------------

class ContextualizeFn(StageFn):
    """One document's list of Chunks -> each Chunk with its context prefix.

    Not dead-lettered (FAILED is None): contextualizers are deterministic string
    functions, so a failure here is a bug that must stop the run."""
    STAGE = "contextualize"

    def __init__(self, kind: str, max_context_tokens: int, tokenizer_path: str | None = None):
        self.kind = kind
        self.max_context_tokens = max_context_tokens
        self.tokenizer_path = tokenizer_path

    def setup(self):
        self.tokenizer = load_tokenizer(self.tokenizer_path)
        self.contextualizer = make_contextualizer(self.kind)

    def apply(self, chunks: list[Chunk], out: Outputs) -> None:
        for chunk in contextualize(chunks, self.contextualizer, self.tokenizer, self.max_context_tokens):
            out.emit(chunk)


class Contextualize(beam.PTransform):
    """PCollection[list[Chunk]] -> PCollection[Chunk] with `context` filled and counted in n_tokens.

    Example:
        chunks = chunked.chunks | "Contextualize" >> Contextualize("title_path", 40, tokenizer_path)
    """

    def __init__(self, kind: str, max_context_tokens: int, tokenizer_path: str | None = None):
        super().__init__()
        self.kind, self.max_context_tokens, self.tokenizer_path = kind, max_context_tokens, tokenizer_path

    def expand(self, chunk_lists):
        return (chunk_lists
                | "ContextualizeChunks" >> beam.ParDo(
                    ContextualizeFn(self.kind, self.max_context_tokens, self.tokenizer_path))
                .with_output_types(Chunk))
