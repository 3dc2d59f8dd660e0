"""Chunking by structure within a budget of model tokens.

Sections (headings) are never mixed in one chunk; inside a section paragraphs
are packed greedily, a paragraph too long for the budget is cut at sentences,
and a sentence too long is cut at word pieces. Every chunk's text fits in
`text_budget` tokens, which leaves room for the context prefix and the special
tokens, so chunk + context never exceed the model's input limit.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import apache_beam as beam
from tokenizers import Tokenizer

from transforms.common.counters import DEAD_LETTER
from transforms.common.sentences import split_sentences
from transforms.common.stage import Outputs, StageFn
from transforms.model.tokens import SPECIAL_TOKENS, count_tokens, load_tokenizer
from transforms.records import Chunk, Document, document_row, stable_id

CHUNKER_VERSION = "2"  # 2: the lines of a paragraph cut at its lines stay lines (table rows)


@dataclass(frozen=True)
class ChunkSettings:
    model_max_tokens: int = 256  # the embedding model's input limit, special tokens included
    chunk_tokens: int = 200  # target size of a chunk's own text
    overlap_tokens: int = 32  # text carried from the previous chunk of the same section
    context_tokens: int = 40  # reserved for the contextualizer's prefix

    @property
    def text_budget(self) -> int:
        return min(self.chunk_tokens, self.model_max_tokens - SPECIAL_TOKENS - self.context_tokens)

    @property
    def version(self) -> str:
        """Goes into chunk ids: other settings produce other chunks, so other ids."""
        return (f"{CHUNKER_VERSION}:{self.model_max_tokens}:{self.chunk_tokens}:"
                f"{self.overlap_tokens}:{self.context_tokens}")


@dataclass
class _Unit:
    text: str
    tokens: int
    joiner: str  # what joins this unit to the one before it


def _hard_split(tokenizer: Tokenizer, text: str, budget: int) -> list[str]:
    """Cut text at word-piece boundaries into pieces of at most `budget` tokens."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    pieces, offsets = [], enc.offsets
    for start in range(0, len(offsets), budget):
        window = offsets[start:start + budget]
        begin = window[0][0]
        end = offsets[start + budget][0] if start + budget < len(offsets) else len(text)
        piece = text[begin:end].strip()
        if piece:
            pieces.append(piece)
    return pieces


def _units(tokenizer: Tokenizer, text: str, budget: int) -> list[_Unit]:
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    counts = count_tokens(tokenizer, paragraphs)
    units: list[_Unit] = []
    for para, n in zip(paragraphs, counts):
        if n <= budget:
            units.append(_Unit(para, n, "\n\n"))
            continue
        # a paragraph of lines (a table, a listing) is cut at its lines, which stay lines in
        # the chunk: an answer can then quote one table row; the tokens are the same either way
        lines = [line for line in para.split("\n") if line.strip()] if "\n" in para.strip() else [para]
        pieces = [(s, "\n" if li and not si else " ") for li, line in enumerate(lines)
                  for si, s in enumerate(split_sentences(line))]
        counts = count_tokens(tokenizer, [s for s, _ in pieces])
        for pi, ((sent, joiner), m) in enumerate(zip(pieces, counts)):
            joiner = "\n\n" if pi == 0 else joiner
            if m <= budget:
                units.append(_Unit(sent, m, joiner))
            else:
                for piece in _hard_split(tokenizer, sent, budget):
                    units.append(_Unit(piece, count_tokens(tokenizer, [piece])[0], joiner))
                    joiner = " "
    return units


def _pack(units: list[_Unit], budget: int, overlap: int) -> list[list[_Unit]]:
    chunks: list[list[_Unit]] = []
    current: list[_Unit] = []
    size = 0
    for unit in units:
        if current and size + unit.tokens > budget:
            chunks.append(current)
            carried: list[_Unit] = []
            carried_size = 0
            for prev in reversed(current):  # overlap: the tail of the previous chunk
                if carried_size + prev.tokens > overlap or carried_size + prev.tokens + unit.tokens > budget:
                    break
                carried.insert(0, prev)
                carried_size += prev.tokens
            current, size = carried, carried_size
        current.append(unit)
        size += unit.tokens
    if current:
        chunks.append(current)
    return chunks


def _join(units: list[_Unit]) -> str:
    return "".join((u.joiner if i else "") + u.text for i, u in enumerate(units))


def chunk_document(doc: Document, tokenizer: Tokenizer, settings: ChunkSettings) -> list[Chunk]:
    """Document -> Chunks with deterministic ids; `context` is left for the contextualizer."""
    budget = settings.text_budget
    if budget <= 0:
        raise ValueError("chunk budget is empty: context_tokens too large for the model limit")
    version = settings.version
    chunks: list[Chunk] = []
    for section in doc.sections:
        for group in _pack(_units(tokenizer, section.text, budget), budget, settings.overlap_tokens):
            text = _join(group)
            n = count_tokens(tokenizer, [text])[0]
            # Joining can merge word pieces differently at the seams; re-cut if so.
            pieces = [(text, n)] if n <= budget else [
                (t, count_tokens(tokenizer, [t])[0]) for t in _hard_split(tokenizer, text, budget)]
            for t, n_text in pieces:
                ordinal = len(chunks)
                chunks.append(Chunk(
                    chunk_id=stable_id(doc.content_hash, version, str(ordinal)),
                    doc_id=doc.doc_id,
                    content_hash=doc.content_hash,
                    ordinal=ordinal,
                    text=t,
                    context="",
                    title=doc.title,
                    heading_path=list(section.heading_path),
                    page=section.page,
                    source_uri=doc.source_uri,
                    source_uris=list(doc.source_uris or [doc.source_uri]),
                    acl=list(doc.acl),
                    metadata=chunk_metadata(doc.metadata, section.page),
                    n_tokens=n_text + SPECIAL_TOKENS,
                    chunker_version=version,
                ))
    return chunks


def chunk_metadata(doc_meta: dict, page) -> dict:
    """The document's metadata for one chunk; for an OCR'd document, the page map becomes
    this chunk's own `ocr` flag and the mean confidence of its page."""
    pages = doc_meta.get("ocr_pages")
    if not pages:
        return dict(doc_meta)
    meta = {k: v for k, v in doc_meta.items() if k not in ("ocr", "ocr_pages", "ocr_mean_confidence")}
    conf = pages.get(str(page)) if page is not None else None
    meta["ocr"] = conf is not None
    if conf is not None:
        meta["ocr_confidence"] = conf
    return meta


# --- the chunk stage in Beam ------------------------------------------------------------

DOCUMENTS = "documents"


class ChunkFn(StageFn):
    """Document -> one list of its Chunks (main output) and its documents-table row (DOCUMENTS)."""
    STAGE, FAILED = "chunk", "dead_lettered_chunk"

    def __init__(self, settings: ChunkSettings, tokenizer_path: str | None = None):
        self.settings = settings
        self.tokenizer_path = tokenizer_path

    def setup(self):
        self.tokenizer = load_tokenizer(self.tokenizer_path)

    def apply(self, doc: Document, out: Outputs) -> None:
        chunks = chunk_document(doc, self.tokenizer, self.settings)
        out.count("chunks", len(chunks))
        out.count("document_rows")
        out.tagged(DOCUMENTS, document_row(doc, len(chunks)))
        if chunks:
            out.emit(chunks)


class ChunkDocuments(beam.PTransform):
    """PCollection[Document] -> outputs `chunks` (one list[Chunk] per document), DOCUMENTS
    (documents-table rows) and DEAD_LETTER (DeadLetter).

    Example:
        chunked = documents | "Chunk" >> ChunkDocuments(ChunkSettings(chunk_tokens=200), tokenizer_path)
        chunked.chunks | ...        # list[Chunk], one list per document, ids f(content hash, settings, ordinal)
        chunked[DOCUMENTS] | ...    # dict rows of DOCUMENT_SCHEMA
    """

    def __init__(self, settings: ChunkSettings, tokenizer_path: str | None = None):
        super().__init__()
        self.settings, self.tokenizer_path = settings, tokenizer_path

    def expand(self, documents):
        return (documents
                | "ChunkDocuments" >> beam.ParDo(ChunkFn(self.settings, self.tokenizer_path))
                .with_output_types(list[Chunk]).with_outputs(DOCUMENTS, DEAD_LETTER, main="chunks"))
