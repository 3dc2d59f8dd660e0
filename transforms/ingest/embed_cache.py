"""Embedding cache: (context + chunk text) -> vector, under one model namespace.

The namespace folds in the model id, the model file's sha256, the pooling and
the max length, so a new model never reads vectors of an old one. Entries live
under INDEX/cache/embeddings/<namespace digest>/; a run writes its new vectors
into its staging dir (Parquet) and they join the cache only after the version
that holds them is published (commit after success).

On a local disk each committed file is an uncompressed Arrow IPC file (.arrow)
with one more column, key_h64 (a 64-bit hash of the key). A reader memory-maps
the files and holds only a sorted array of those hashes with each entry's file
and row (16 bytes an entry); a lookup reads the one row it needs, so an embed
worker's memory does not grow with the cache's vectors. Parquet files left by
earlier versions are rewritten once, at the start of the next index run
(`convert_parquet_files`). On object storage nothing can be memory-mapped: the
cache stays Parquet and is read whole into each worker, as before.
"""
from __future__ import annotations

import glob
import hashlib
import os
from typing import Iterable, Optional

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
KEY_HASH = "key_h64"  # in .arrow cache files: key_hash(key), so loading never reads the keys
ARROW_SUFFIX = ".arrow"
RECENT_LOOKUPS = 4096  # positions remembered (the embed stage's batches are at most 8 x batch_size)
CONVERT_BATCH_ROWS = 8192  # rows held in memory while a Parquet file is rewritten (~40 MB at 384-d)


def cache_key(embed_text: str) -> str:
    return hashlib.sha256(embed_text.encode("utf-8")).hexdigest()[:40]


def key_hash(key: str) -> int:
    """The 64-bit hash a cache file indexes a key by (a collision only costs a key comparison).
    A cache_key is sha256 hex: its first 16 digits already are one (and cost a fifth of hashing)."""
    if len(key) == 40:
        try:
            return int(key[:16], 16)
        except ValueError:
            pass
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little")


def _key_hashes(keys: Iterable[str], n: int) -> np.ndarray:
    return np.fromiter((key_hash(k) for k in keys), np.uint64, n)


def arrow_file_schema(dim: int) -> pa.Schema:
    return cache_schema(dim).append(pa.field(KEY_HASH, pa.uint64()))


def namespace_dir(index_dir: str, namespace: str) -> str:
    digest = hashlib.sha256(namespace.encode("utf-8")).hexdigest()[:16]
    return storage.join(index_dir, "cache", "embeddings", digest)


def _read_parquet(uri: str) -> pa.Table:
    if is_s3(uri):
        return pq.read_table(pa.BufferReader(storage.read_bytes(uri)))
    return pq.read_table(uri)


def _with_cache_columns(t, schema: pa.Schema):
    """A table or batch of cache entries with every column of `schema`: entries written before
    sentence vectors lack their columns."""
    if isinstance(t, pa.RecordBatch):
        t = pa.Table.from_batches([t])
    for field in schema:
        if field.name not in t.column_names:
            t = t.append_column(field, pa.nulls(t.num_rows, field.type))
    return t.select(schema.names)


def _dim_of(schema: pa.Schema, where: str) -> int:
    typ = schema.field("embedding").type
    if not pa.types.is_fixed_size_list(typ):
        raise ValueError(f"embedding cache file {where}: embedding is {typ}, not a fixed-size list")
    return typ.list_size


# --- writing .arrow cache files ------------------------------------------------------------

def write_arrow_file(batches: Iterable, path: str, dim: int) -> int:
    """Cache entries (tables or record batches of cache_schema columns) -> an uncompressed Arrow
    IPC file at `path`, written to path + ".tmp" and renamed, so a reader never sees half a file.
    Returns the rows written."""
    schema = cache_schema(dim)
    file_schema = arrow_file_schema(dim)
    tmp = path + ".tmp"  # not *.arrow: never listed; a later commit of the same file overwrites it
    rows = 0
    with pa.OSFile(tmp, "wb") as sink:
        with pa.ipc.new_file(sink, file_schema) as writer:
            for b in batches:
                t = _with_cache_columns(b, schema).cast(schema)
                t = t.append_column(KEY_HASH, pa.array(
                    _key_hashes(t.column("key").to_pylist(), t.num_rows), pa.uint64()))
                writer.write_table(t)
                rows += t.num_rows
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return rows


def _parquet_batches(path: str):
    return pq.ParquetFile(path).iter_batches(batch_size=CONVERT_BATCH_ROWS)


def convert_parquet_files(cache_dir: Optional[str]) -> int:
    """Rewrite the Parquet files of a LOCAL embedding cache dir (caches written by earlier
    versions, or by hand) as .arrow files, one at a time: the .arrow file is complete before the
    Parquet one is removed (a reader in between sees both, and a key in two files is fine).
    An s3:// dir is left as it is. Returns the files converted."""
    if not cache_dir or is_s3(cache_dir):
        return 0
    done = 0
    for f in sorted(glob.glob(os.path.join(cache_dir, "*.parquet"))):
        dim = _dim_of(pq.read_schema(f), f)
        write_arrow_file(_parquet_batches(f), f[:-len(".parquet")] + ARROW_SUFFIX, dim)
        os.remove(f)
        done += 1
    return done


# --- reading --------------------------------------------------------------------------------

class _Part:
    """One record batch of a cache file, as numpy views of its buffers (of the memory map for an
    .arrow file: nothing is read until a row is looked up)."""

    def __init__(self, batch: pa.RecordBatch, dim: int, where: str):
        emb = batch.column("embedding")
        if emb.type.list_size != dim:  # the namespace folds in the model file, so this is a bug
            raise ValueError(f"embedding cache {where} holds {emb.type.list_size}-d vectors, model has {dim}")
        if emb.null_count:
            raise ValueError(f"embedding cache {where}: {emb.null_count} entries without a vector")
        self.keys = batch.column("key")
        self.vectors = emb.flatten().to_numpy(zero_copy_only=True).reshape(len(emb), dim)
        sv = batch.column("sentence_vectors")
        self.has_sentences = sv.is_valid().to_numpy(zero_copy_only=False)
        self.s_off, self.starts = _list_parts(batch.column("sentence_starts"))
        self.e_off, self.ends = _list_parts(batch.column("sentence_ends"))
        self.v_off = sv.offsets.to_numpy(zero_copy_only=True)
        inner = sv.values  # fixed_size_list<int8, dim>: offsets index its rows
        self.svec = inner.values.slice(inner.offset * dim, len(inner) * dim) \
            .to_numpy(zero_copy_only=True).reshape(len(inner), dim)

    def sentences(self, r: int):
        a, b = int(self.s_off[r]), int(self.s_off[r + 1])
        c, d = int(self.e_off[r]), int(self.e_off[r + 1])
        spans = list(zip(self.starts[a:b].tolist(), self.ends[c:d].tolist()))
        return spans, self.svec[int(self.v_off[r]):int(self.v_off[r + 1])]


def _list_parts(arr: pa.ListArray):
    """(offsets, values) of a list<int32> column as numpy (offsets index the values)."""
    values = arr.values
    return (arr.offsets.to_numpy(zero_copy_only=True),
            values.to_numpy(zero_copy_only=values.null_count == 0))


def _arrow_batches(path: str):
    """The record batches of an .arrow cache file, zero-copy from a memory map (pages load when a
    row is touched; the file handle is closed, the mapping lives as long as the batches)."""
    source = pa.memory_map(path, "r")
    try:
        reader = pa.ipc.open_file(source)
        return [reader.get_batch(i) for i in range(reader.num_record_batches)]
    finally:
        source.close()


class EmbeddingCache:
    """Read side: loaded once per worker; lookups by key.

    Holds per entry only its key's hash, file part and row (sorted by hash); the vectors stay in
    the memory-mapped .arrow files (or, for Parquet files, in memory, as read)."""

    def __init__(self, parts: list, hashes: np.ndarray, part_ids: np.ndarray, rows: np.ndarray):
        order = np.argsort(hashes, kind="stable")
        self.parts = parts
        self.hashes = hashes[order]
        self.part_ids = part_ids[order]
        self.rows = rows[order]
        self._n = int(np.count_nonzero(np.diff(self.hashes))) + 1 if len(self.hashes) else 0
        self._recent: dict = {}  # embed_chunks asks get, then get_sentences, for each key of a batch

    @classmethod
    def load(cls, directory: Optional[str], dim: int) -> "EmbeddingCache":
        if directory and is_s3(directory):
            files = storage.list_files(directory, suffix=".parquet")
        else:
            files = sorted(glob.glob(os.path.join(directory, "*.parquet")) +
                           glob.glob(os.path.join(directory, "*" + ARROW_SUFFIX))) if directory else []
        schema = cache_schema(dim)
        parts, hashes, part_ids, rows = [], [], [], []
        for f in files:
            if f.endswith(ARROW_SUFFIX):
                batches = _arrow_batches(f)
                names = batches[0].schema.names if batches else []
                known = KEY_HASH in names
            else:
                batches = _with_cache_columns(_read_parquet(f), schema).to_batches()
                known = False
            for b in batches:
                if not b.num_rows:
                    continue
                parts.append(_Part(b, dim, f))
                hashes.append(b.column(KEY_HASH).to_numpy(zero_copy_only=False).astype(np.uint64, copy=False)
                              if known else _key_hashes(b.column("key").to_pylist(), b.num_rows))
                part_ids.append(np.full(b.num_rows, len(parts) - 1, np.int32))
                rows.append(np.arange(b.num_rows, dtype=np.int32))
        if not parts:
            return cls([], np.zeros(0, np.uint64), np.zeros(0, np.int32), np.zeros(0, np.int32))
        return cls(parts, np.concatenate(hashes), np.concatenate(part_ids), np.concatenate(rows))

    def __len__(self) -> int:
        return self._n

    def _find(self, key: str):
        """(part, row) of the key, or None."""
        found = self._recent.get(key, False)
        if found is not False:
            return found
        h = np.uint64(key_hash(key))
        i = int(self.hashes.searchsorted(h))
        found = None
        while i < len(self.hashes) and self.hashes[i] == h:
            part, r = self.parts[self.part_ids[i]], int(self.rows[i])
            if part.keys[r].as_py() == key:
                found = (part, r)
                break
            i += 1
        if len(self._recent) >= RECENT_LOOKUPS:
            self._recent.clear()
        self._recent[key] = found
        return found

    def get(self, key: str) -> Optional[np.ndarray]:
        found = self._find(key)
        return None if found is None else found[0].vectors[found[1]]

    def get_sentences(self, key: str):
        """(spans, int8 vectors) cached for the chunk, or None (unknown, or an older entry)."""
        found = self._find(key)
        if found is None or not found[0].has_sentences[found[1]]:
            return None
        return found[0].sentences(found[1])


def _free_name(cache_dir: str, version: str, start: int, suffix: str) -> tuple[str, int]:
    """The first <version>-NNNNN<suffix> not in the cache yet: a commit that stopped half way and
    is done again later (recover_cache_entries) never overwrites the files it already wrote."""
    i = start
    while os.path.exists(os.path.join(cache_dir, f"{version}-{i:05d}{suffix}")):
        i += 1
    return os.path.join(cache_dir, f"{version}-{i:05d}{suffix}"), i + 1


def commit_new_entries(version_dir: str, cache_dir: str, version: str, new_dir: str = NEW_ENTRIES_DIR) -> int:
    """Move a published version's new entries (vectors, or the llm's contexts: new_dir) into
    the cache: on object storage one copy per file; locally the llm's contexts one rename per
    file, the vectors rewritten as .arrow files (the local form, see above), one per file."""
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
    if new_dir != NEW_ENTRIES_DIR:  # the llm's contexts: renamed as they are
        for i, f in enumerate(files):
            if pq.read_metadata(f).num_rows:
                os.replace(f, os.path.join(cache_dir, f"{version}-{i:05d}.parquet"))
                moved += 1
            else:
                os.remove(f)
        return moved
    nxt = 0
    for f in files:
        if pq.read_metadata(f).num_rows:
            target, nxt = _free_name(cache_dir, version, nxt, ARROW_SUFFIX)
            write_arrow_file(_parquet_batches(f), target, _dim_of(pq.read_schema(f), f))
            moved += 1
        os.remove(f)  # after the .arrow file is complete: a kill in between commits it again later
    return moved
