"""Embedding cache: (context + chunk text) -> vector, under one model namespace.

The namespace folds in the model id, the model file's sha256, the pooling and
the max length, so a new model never reads vectors of an old one. Entries are
Parquet files under INDEX/cache/embeddings/<namespace digest>/; a run writes its
new vectors into its staging dir and they join the cache only after the version
that holds them is published (commit after success).
"""
from __future__ import annotations

import glob
import hashlib
import os
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.common import storage
from transforms.common.s3 import is_s3


def cache_schema(dim: int) -> pa.Schema:
    """Cache entries for vectors of `dim` floats (ModelSpec.dim)."""
    return pa.schema([("key", pa.string()), ("embedding", pa.list_(pa.float32(), dim)),
                      # the chunk's sentence spans and int8 vectors (null in older entries)
                      ("sentence_starts", pa.list_(pa.int32())),
                      ("sentence_ends", pa.list_(pa.int32())),
                      ("sentence_vectors", pa.list_(pa.list_(pa.int8(), dim)))])


NEW_ENTRIES_DIR = "embeddings_new"  # inside a staging version dir


def cache_key(embed_text: str) -> str:
    return hashlib.sha256(embed_text.encode("utf-8")).hexdigest()[:40]


def namespace_dir(index_dir: str, namespace: str) -> str:
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:16]
    return storage.join(index_dir, "cache", "embeddings", digest)


def _read_parquet(uri: str) -> pa.Table:
    if is_s3(uri):
        return pq.read_table(pa.BufferReader(storage.read_bytes(uri)))
    return pq.read_table(uri)


class EmbeddingCache:
    """Read side: loaded once per worker; lookups by key."""

    def __init__(self, keys: list[str], vectors: np.ndarray, sentences=None):
        self.index = {k: i for i, k in enumerate(keys)}
        self.vectors = vectors
        self.sentences = sentences  # sentvec.SentenceStore over the same rows, or None

    @classmethod
    def load(cls, directory: Optional[str], dim: int) -> "EmbeddingCache":
        if directory and is_s3(directory):
            files = storage.list_files(directory, suffix=".parquet")
        else:
            files = sorted(glob.glob(os.path.join(directory, "*.parquet"))) if directory else []
        if not files:
            return cls([], np.zeros((0, dim), np.float32))
        schema = cache_schema(dim)
        tables = []
        for f in files:  # entries written before sentence vectors lack their columns
            t = _read_parquet(f)
            for field in schema:
                if field.name not in t.column_names:
                    t = t.append_column(field, pa.nulls(t.num_rows, field.type))
            tables.append(t.select(schema.names))
        table = pa.concat_tables(tables)
        col = table.column("embedding").combine_chunks()
        if col.type.list_size != dim:  # the namespace folds in the model file, so this is a bug
            raise ValueError(f"embedding cache {directory} holds {col.type.list_size}-d vectors, model has {dim}")
        vectors = col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), dim)
        from transforms.ingest.sentvec import SentenceStore
        sent = SentenceStore.from_arrow(*(table.column(n).combine_chunks() for n in
                                          ("sentence_starts", "sentence_ends", "sentence_vectors")))
        return cls(table.column("key").to_pylist(), vectors, sent)

    def __len__(self) -> int:
        return len(self.index)

    def get(self, key: str) -> Optional[np.ndarray]:
        i = self.index.get(key)
        return None if i is None else self.vectors[i]

    def get_sentences(self, key: str):
        """(spans, int8 vectors) cached for the chunk, or None (unknown, or an older entry)."""
        i = self.index.get(key)
        if i is None or self.sentences is None or not self.sentences.has_vectors[i]:
            return None
        r = self.sentences.rows(i)
        return list(zip(self.sentences.start[r].tolist(), self.sentences.end[r].tolist())), self.sentences.vec[r]


def commit_new_entries(version_dir: str, cache_dir: str, version: str, new_dir: str = NEW_ENTRIES_DIR) -> int:
    """Move a published version's new entries (vectors, or the llm's contexts: new_dir) into
    the cache (one rename per file)."""
    if is_s3(version_dir):
        moved = 0
        for i, f in enumerate(storage.list_files(storage.join(version_dir, new_dir), suffix=".parquet")):
            if pq.read_metadata(pa.BufferReader(storage.read_bytes(f))).num_rows:
                storage.copy(f, storage.join(cache_dir, f"{version}-{i:05d}.parquet"))  # then drop the source
                moved += 1
            storage.delete(f)
        return moved
    files = sorted(glob.glob(os.path.join(version_dir, new_dir, "*.parquet")))
    os.makedirs(cache_dir, exist_ok=True)
    moved = 0
    for i, f in enumerate(files):
        if pq.read_metadata(f).num_rows:
            os.replace(f, os.path.join(cache_dir, f"{version}-{i:05d}.parquet"))
            moved += 1
        else:
            os.remove(f)
    return moved
