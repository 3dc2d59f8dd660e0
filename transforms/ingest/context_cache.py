"""The llm contextualizer's cache: (document hash, chunk hash) -> the sentences the llm wrote,
under one namespace per model, prompt version and prompt settings.

Same life cycle as the embedding cache (embed_cache.py): entries are Parquet files under
INDEX/cache/contexts/<namespace digest>/; a run writes what it generated into its staging
dir (NEW_CONTEXTS_DIR) and it joins the cache only after that version is published. So a
nightly run asks the llm only for chunks it has not seen in a document it has not seen,
and a change of embedding model re-embeds without asking the llm again.
"""
from __future__ import annotations

import glob
import hashlib
import os
from typing import Optional

import pyarrow as pa

from transforms.common import storage
from transforms.common.s3 import is_s3

CONTEXT_SCHEMA = pa.schema([("key", pa.string()), ("context", pa.string())])
NEW_CONTEXTS_DIR = "contexts_new"  # inside a staging version dir


def context_key(content_hash: str, chunk_text: str) -> str:
    chunk_hash = hashlib.sha256(chunk_text.encode("utf-8")).hexdigest()
    return hashlib.sha256(f"{content_hash}\0{chunk_hash}".encode()).hexdigest()[:40]


def namespace_dir(index_dir: str, namespace: str) -> str:
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:16]
    return storage.join(index_dir, "cache", "contexts", digest)


def load_contexts(directory: Optional[str]) -> dict[str, str]:
    """key -> context, from every entry file of the namespace (none yet: empty)."""
    from transforms.ingest.embed_cache import _read_parquet
    if not directory:
        return {}
    files = storage.list_files(directory, suffix=".parquet") if is_s3(directory) else \
        sorted(glob.glob(os.path.join(directory, "*.parquet")))
    out: dict[str, str] = {}
    for f in files:
        t = _read_parquet(f)
        out.update(zip(t.column("key").to_pylist(), t.column("context").to_pylist()))
    return out
