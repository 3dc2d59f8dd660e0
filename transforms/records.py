"""The record types that flow between stages, and their Arrow schemas.

One place defines every record: the dataclasses are what stage functions take
and return; the Arrow schemas beside them are what the Parquet writer and the
DuckDB build use. Adding a field is a change here and nowhere else.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from transforms.common.text import embedding_text


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def stable_id(*parts: str, length: int = 32) -> str:
    """A deterministic id from its parts (same parts -> same id on any runner)."""
    h = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return h[:length]


def record_doc_id(key: str, record_id: str) -> str:
    """A JSONL record's doc_id: its own id, then "@" and 12 hex digits of its file's key, so
    the same record id in two files names two documents, and none equals a file's
    path-derived id (32 hex digits, no "@"). record_id_of() reads the record id back."""
    return f"{record_id}@{stable_id('source', key, length=12)}"


_RECORD_DOC_ID = re.compile(r"(.*)@[0-9a-f]{12}", re.S)


def record_id_of(doc_id: str) -> Optional[str]:
    """The record's own id for a JSONL record's doc_id; None for any other document."""
    m = _RECORD_DOC_ID.fullmatch(doc_id)
    return m.group(1) if m else None


@dataclass(frozen=True)
class RawObject:
    """One object read from storage, before any interpretation."""
    uri: str
    key: str  # path under the input root, '/'-separated: the same for a local copy and s3
    data: bytes
    size: int
    mtime: float  # seconds since the epoch, as the store reports it
    content_hash: str  # sha256(data)

    @staticmethod
    def from_bytes(uri: str, key: str, data: bytes, mtime: float = 0.0) -> "RawObject":
        return RawObject(uri=uri, key=key, data=data, size=len(data), mtime=mtime,
                         content_hash=sha256_hex(data))


@dataclass(frozen=True)
class UniqueObject:
    """One distinct content, with every path it was found under (sorted)."""
    raw: RawObject  # the representative: the smallest uri among the copies
    source_uris: tuple[str, ...]


@dataclass
class Section:
    heading_path: list[str]  # e.g. ["Install", "On Debian"]; [] for text before any heading
    text: str
    page: Optional[int] = None  # 1-based page for paged formats (PDF)


@dataclass
class Document:
    doc_id: str
    content_hash: str  # hash of the bytes this document came from (a record's own bytes for JSONL)
    source_uri: str  # the representative path
    key: str  # the representative path under the input root (doc ids derive from it)
    format: str  # html | markdown | pdf | text | man | jsonl
    title: str
    sections: list[Section]
    source_uris: list[str] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    acl: list[str] = field(default_factory=list)
    size: int = 0
    mtime: float = 0.0
    source_hash: str = ""  # sha256 of the file this came from (differs from content_hash for JSONL records)

    @property
    def text(self) -> str:
        return "\n\n".join(s.text for s in self.sections if s.text)


@dataclass
class Chunk:
    chunk_id: str
    doc_id: str
    content_hash: str
    ordinal: int
    text: str  # raw chunk text, for display and citation
    context: str  # "<title> › <section path>", prefixed for embedding and BM25
    title: str
    heading_path: list[str]
    page: Optional[int]
    source_uri: str
    source_uris: list[str]
    acl: list[str]
    metadata: dict[str, Any]
    n_tokens: int  # model tokens of context + text, special tokens included
    chunker_version: str

    @property
    def embed_text(self) -> str:
        return embedding_text(self.context, self.text)


@dataclass(frozen=True)
class DeadLetter:
    source_uri: str
    content_hash: str
    stage: str  # read | parse | chunk | embed
    reason: str


# --- Arrow schemas -----------------------------------------------------------------

def chunk_schema(dim: int) -> pa.Schema:
    """The chunks table for vectors of `dim` floats (ModelSpec.dim)."""
    return pa.schema(_chunk_fields(dim))


def embedding_dim(schema: pa.Schema) -> int:
    """The vector dimension of a chunks (or embedding cache) table's `embedding` column."""
    return schema.field("embedding").type.list_size


def _chunk_fields(dim: int) -> list:
    return [
    ("chunk_id", pa.string()),
    ("doc_id", pa.string()),
    ("content_hash", pa.string()),
    ("ordinal", pa.int32()),
    ("source_uri", pa.string()),
    ("source_uris", pa.list_(pa.string())),
    ("title", pa.string()),
    ("heading_path", pa.list_(pa.string())),
    ("page", pa.int32()),
    ("text", pa.string()),
    ("context", pa.string()),
    ("n_tokens", pa.int32()),
    ("embedding", pa.list_(pa.float32(), dim)),
    ("model_id", pa.string()),
    ("model_sha256", pa.string()),
    ("chunker_version", pa.string()),
    ("acl", pa.list_(pa.string())),
    ("metadata", pa.string()),  # JSON object
    ("indexed_at", pa.timestamp("s", tz="UTC")),
    # Index-time sentence vectors (transforms/ingest/sentvec.py): char spans of the chunk
    # text's sentences and one int8 vector each (late chunking). Null in rows written before.
    ("sentence_starts", pa.list_(pa.int32())),
    ("sentence_ends", pa.list_(pa.int32())),
    ("sentence_vectors", pa.list_(pa.list_(pa.int8(), dim))),
]


SENTENCE_COLUMNS = ("sentence_starts", "sentence_ends", "sentence_vectors")


CHUNK_COLUMNS = tuple(name for name, _ in _chunk_fields(1))

DOCUMENT_SCHEMA = pa.schema([
    ("doc_id", pa.string()),
    ("content_hash", pa.string()),
    ("source_hash", pa.string()),
    ("source_uri", pa.string()),
    ("source_uris", pa.list_(pa.string())),
    ("key", pa.string()),
    ("format", pa.string()),
    ("title", pa.string()),
    ("status", pa.string()),  # indexed | empty
    ("chunk_count", pa.int32()),
    ("size", pa.int64()),
    ("mtime", pa.float64()),
    ("acl", pa.list_(pa.string())),
    ("metadata", pa.string()),  # JSON object
])

# One row per path seen in the source: what the nightly run compares against.
SOURCE_SCHEMA = pa.schema([
    ("uri", pa.string()),
    ("key", pa.string()),
    ("size", pa.int64()),
    ("mtime", pa.float64()),
    ("content_hash", pa.string()),
    ("status", pa.string()),  # live | tombstoned
    ("tombstoned_at", pa.string()),  # ISO date of the run that found the path gone
])

DEAD_LETTER_SCHEMA = pa.schema([
    ("source_uri", pa.string()),
    ("content_hash", pa.string()),
    ("stage", pa.string()),
    ("reason", pa.string()),
])


def chunk_row(chunk: Chunk, embedding: list[float], model_id: str, model_sha256: str,
              indexed_at, sentences=None) -> dict:
    """A Chunk plus its vector (and its sentences: (spans, int8 vectors)), as one row of
    chunk_schema(dim)."""
    row = {f.name: getattr(chunk, f.name) for f in dataclasses.fields(chunk)
           if f.name in CHUNK_COLUMNS}
    row["metadata"] = json.dumps(chunk.metadata, sort_keys=True, default=str)
    # float32 numpy, not a list of Python floats: ~1.5 KB a row instead of ~12 KB while
    # the runner holds rows in memory; pyarrow converts it to fixed_size_list directly.
    row["embedding"] = np.asarray(embedding, dtype=np.float32)
    row["model_id"] = model_id
    row["model_sha256"] = model_sha256
    row["indexed_at"] = indexed_at
    if sentences is not None:
        spans, vecs = sentences
        row["sentence_starts"] = [int(a) for a, _ in spans]
        row["sentence_ends"] = [int(b) for _, b in spans]
        row["sentence_vectors"] = [np.asarray(v, np.int8) for v in vecs]
    else:
        row["sentence_starts"] = row["sentence_ends"] = row["sentence_vectors"] = None
    return row


def document_row(doc: Document, chunk_count: int) -> dict:
    return {
        "doc_id": doc.doc_id,
        "content_hash": doc.content_hash,
        "source_hash": doc.source_hash or doc.content_hash,
        "source_uri": doc.source_uri,
        "source_uris": list(doc.source_uris or [doc.source_uri]),
        "key": doc.key,
        "format": doc.format,
        "title": doc.title,
        "status": "indexed" if chunk_count else "empty",
        "chunk_count": chunk_count,
        "size": doc.size,
        "mtime": doc.mtime,
        "acl": list(doc.acl),
        "metadata": json.dumps(doc.metadata, sort_keys=True, default=str),
    }


def dead_letter_row(d: DeadLetter) -> dict:
    return dataclasses.asdict(d)
