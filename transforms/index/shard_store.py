"""Shared, immutable, content-addressed Parquet shards, and which of their rows a version holds.

  INDEX/shards/<table>/<name>.parquet       rows of one table (chunks, documents, dead_letters)
  INDEX/shards/<table>/<name>.keys.parquet  its summary: every row key the shard holds, with a row count

A shard's name is the first 32 hex digits of the sha256 of its bytes. It is written once (summary
first, shard last; a run that finds the name there writes nothing) and shared by every version that
lists it, like a segment. A version's manifest lists its shards (`tables`: per table, the shards in
order with their row and deleted counts). Rows a version no longer holds are recorded, never copied
around: versions/<v>/deletions/<table>.parquet holds (shard, key) pairs, and a row of shard S is
live in the version unless (S, its key) is there.

A key groups the rows that are kept, rewritten or dropped together (one document's):
  chunks: content_hash + doc_id; documents: source_hash + content_hash + doc_id;
  dead_letters: content_hash.
Every reader of a version's rows (shards.read_table, the segment build, the nightly carry) reads
through `live_table` / `live_batches`, which apply the deletions; `open_shard` is the one place a
shard is opened for reading.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.common import storage
from transforms.common.s3 import is_s3

SHARDS_DIR = "shards"
DELETIONS_DIR = "deletions"
SHARD_SUFFIX = ".parquet"
SUMMARY_SUFFIX = ".keys.parquet"
NAME_RE = re.compile(r"^[0-9a-f]{32}$")
KEY_SEP = "\x1f"  # never in a hex hash, so the first separator splits a key
KEY_COLUMNS = {"chunks": ("content_hash", "doc_id"),
               "documents": ("source_hash", "content_hash", "doc_id"),
               "dead_letters": ("content_hash",),
               # near-duplicate signatures, a row per signed document: kept like its document
               "signatures": ("source_hash", "content_hash", "doc_id")}
SHARED_TABLES = tuple(KEY_COLUMNS)
SUMMARY_SCHEMA = pa.schema([("key", pa.string()), ("rows", pa.int64())])


# --- keys and names ---------------------------------------------------------------------------

def row_keys(table: str, rows) -> pa.Array:
    """The key of every row of a Table or RecordBatch of `table` (nulls count as "")."""
    cols = []
    for name in KEY_COLUMNS[table]:
        col = rows.column(name)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks else pa.array([], col.type)
        cols.append(pc.fill_null(col.cast(pa.string()), ""))
    return cols[0] if len(cols) == 1 else pc.binary_join_element_wise(*cols, KEY_SEP)


def shard_name(path: str) -> str:
    return storage.sha256_file(path)[:32]


def index_of(version_dir: str) -> str:
    """INDEX for INDEX/versions/<v> or INDEX/staging/<v> (local path or s3:// prefix)."""
    return version_dir.rstrip("/").rsplit("/", 2)[0]


def shard_uri(index_dir: str, table: str, name: str) -> str:
    return storage.join(index_dir, SHARDS_DIR, table, name + SHARD_SUFFIX)


def summary_uri(index_dir: str, table: str, name: str) -> str:
    return storage.join(index_dir, SHARDS_DIR, table, name + SUMMARY_SUFFIX)


def deletions_path(version_dir: str, table: str) -> str:
    return storage.join(version_dir, DELETIONS_DIR, table + ".parquet")


# --- what a version lists --------------------------------------------------------------------

@dataclass
class ShardEntry:
    name: str
    rows: int
    deleted: int = 0

    @property
    def live(self) -> int:
        return self.rows - self.deleted

    def to_json(self) -> dict:
        return {"name": self.name, "rows": self.rows, "deleted": self.deleted}


@dataclass
class TableShards:
    """One table of a version: its shards in order, and the keys deleted from each (shard name ->
    keys; only shards with deletions appear)."""
    entries: list[ShardEntry] = field(default_factory=list)
    deleted: dict[str, pa.Array] = field(default_factory=dict)

    @property
    def live_rows(self) -> int:
        return sum(e.live for e in self.entries)


def listed_tables(manifest: Optional[dict]) -> Optional[dict]:
    """The manifest's `tables`, or None for a version that keeps its shards in its own folder."""
    tables = (manifest or {}).get("tables")
    return tables if isinstance(tables, dict) else None


def read_manifest_at(version_dir: str) -> Optional[dict]:
    try:
        return json.loads(storage.read_text(storage.join(version_dir, "manifest.json")))
    except (OSError, ValueError):
        return None


def table_shards(version_dir: str, table: str, manifest: Optional[dict] = None) -> Optional[TableShards]:
    """What `version_dir` lists of `table` (None when its manifest lists no shared shards)."""
    manifest = manifest if manifest is not None else read_manifest_at(version_dir)
    tables = listed_tables(manifest)
    if tables is None or table not in tables:
        return None
    info = tables[table]
    entries = [ShardEntry(e["name"], int(e["rows"]), int(e.get("deleted", 0))) for e in info.get("shards", [])]
    deleted: dict[str, pa.Array] = {}
    if info.get("deletions"):
        t = _read_parquet(storage.join(version_dir, info["deletions"]))
        for name, keys in _group_keys(t).items():
            deleted[name] = keys
    return TableShards(entries, deleted)


def _group_keys(t: pa.Table) -> dict[str, pa.Array]:
    if not t.num_rows:
        return {}
    t = t.sort_by([("shard", "ascending"), ("key", "ascending")])
    shards = t.column("shard").combine_chunks()
    keys = t.column("key").combine_chunks()
    out = {}
    bounds = pc.run_end_encode(shards)
    ends = bounds.run_ends.to_pylist()
    names = bounds.values.to_pylist()
    start = 0
    for name, end in zip(names, ends):
        out[name] = keys.slice(start, end - start)
        start = end
    return out


def write_deletions(version_dir: str, table: str, deleted: dict[str, pa.Array]) -> Optional[str]:
    """versions/<v>/deletions/<table>.parquet (local); returns its path relative to the version,
    or None when nothing is deleted."""
    parts = [(n, k) for n, k in sorted(deleted.items()) if len(k)]
    if not parts:
        return None
    t = pa.table({"shard": pa.concat_arrays([pa.array([n] * len(k), pa.string()) for n, k in parts]),
                  "key": pa.concat_arrays([k.cast(pa.string()) for _, k in parts])})
    path = deletions_path(version_dir, table)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    pq.write_table(t.sort_by([("shard", "ascending"), ("key", "ascending")]), path, compression="zstd")
    return f"{DELETIONS_DIR}/{table}.parquet"


def manifest_tables(version_dir: str, tables: dict[str, TableShards]) -> dict:
    """The manifest's `tables` for these listings, their deletions written into version_dir."""
    out = {}
    for table, ts in tables.items():
        out[table] = {"shards": [e.to_json() for e in ts.entries],
                      "deletions": write_deletions(version_dir, table, ts.deleted)}
    return out


# --- reading ---------------------------------------------------------------------------------

@contextlib.contextmanager
def open_shard(uri: str):
    """The one place a shard is opened for reading (an s3:// one through a temp download): tests
    count the opens."""
    with storage.open_local_or_download(uri) as local:
        f = pq.ParquetFile(local)
        try:
            yield f
        finally:
            f.close()


def _read_parquet(uri: str, columns=None) -> pa.Table:
    if is_s3(uri):
        return pq.read_table(pa.BufferReader(storage.read_bytes(uri)), columns=columns)
    return pq.read_table(uri, columns=columns)


def _wanted(table: str, columns, deleted) -> Optional[list[str]]:
    if columns is None:
        return None
    extra = [c for c in KEY_COLUMNS[table] if c not in columns] if deleted is not None and len(deleted) else []
    return list(columns) + extra


def drop_deleted(table: str, rows, deleted: Optional[pa.Array]):
    """rows (Table or RecordBatch) without those whose key is in `deleted`."""
    if deleted is None or not len(deleted) or not rows.num_rows:
        return rows
    return rows.filter(pc.invert(pc.is_in(row_keys(table, rows), value_set=deleted)))


def live_batches(uri: str, table: str, deleted: Optional[pa.Array] = None, columns=None,
                 batch_size: int = 4096) -> Iterator[pa.RecordBatch]:
    """The live rows of one shard, a batch at a time."""
    want = _wanted(table, columns, deleted)
    with open_shard(uri) as f:
        for batch in f.iter_batches(batch_size=batch_size, columns=want):
            batch = drop_deleted(table, batch, deleted)
            if columns is not None:
                batch = batch.select(list(columns))
            if batch.num_rows:
                yield batch


def read_shard(uri: str, table: str, deleted: Optional[pa.Array] = None, columns=None) -> pa.Table:
    """The live rows of one shard, whole."""
    with open_shard(uri) as f:
        t = f.read(columns=_wanted(table, columns, deleted))
    t = drop_deleted(table, t, deleted)
    return t.select(list(columns)) if columns is not None else t


def live_table(version_dir: str, table: str, columns=None, listing: Optional[TableShards] = None,
               source: Optional["ShardSource"] = None) -> pa.Table:
    """Every live row of `table` in the version (its listed shards, deletions applied)."""
    listing = listing if listing is not None else table_shards(version_dir, table)
    if listing is None:
        raise FileNotFoundError(f"{version_dir}: its manifest lists no {table} shards")
    source = source or ShardSource(index_of(version_dir))
    parts = [read_shard(source.path(table, e.name), table, listing.deleted.get(e.name), columns)
             for e in listing.entries]
    if not parts:
        from transforms.records import DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA
        schema = {"documents": DOCUMENT_SCHEMA, "dead_letters": DEAD_LETTER_SCHEMA}.get(table)
        if schema is None:
            raise FileNotFoundError(f"no {table} shards listed by {version_dir}")
        empty = schema.empty_table()
        return empty.select(list(columns)) if columns is not None else empty
    return pa.concat_tables(parts, promote_options="default")


@dataclass
class ShardSource:
    """Where a driver reads shards from: the index itself (local), or for an s3:// index a local
    cache laid out the same (`cache`/shards/...), filled on first use."""
    index_dir: str
    cache: Optional[str] = None

    def path(self, table: str, name: str) -> str:
        return self._local(shard_uri, table, name)

    def summary(self, table: str, name: str) -> pa.Table:
        try:
            return pq.read_table(self._local(summary_uri, table, name))
        except FileNotFoundError:  # written before its shard, so only ever missing if removed by hand
            return summarize(self.path(table, name), table)

    def _local(self, where, table: str, name: str) -> str:
        if not is_s3(self.index_dir):
            return where(self.index_dir, table, name)
        if self.cache is None:
            return where(self.index_dir, table, name)  # read remotely (open_shard downloads)
        local = where(self.cache, table, name)
        if not os.path.exists(local):
            os.makedirs(os.path.dirname(local), exist_ok=True)
            storage.download_file(where(self.index_dir, table, name), local)
        return local


# --- writing ---------------------------------------------------------------------------------

def summarize(path: str, table: str) -> pa.Table:
    """A shard's summary: each key with its number of rows, sorted by key."""
    with open_shard(path) as f:
        t = f.read(columns=list(KEY_COLUMNS[table]))
    keys = row_keys(table, t)
    if not len(keys):
        return SUMMARY_SCHEMA.empty_table()
    counts = pc.value_counts(keys)
    out = pa.table({"key": counts.field("values"), "rows": counts.field("counts").cast(pa.int64())})
    return out.sort_by("key").cast(SUMMARY_SCHEMA)


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def store(index_dir: str, table: str, local_path: str, staged_uri: Optional[str] = None,
          cache: Optional[str] = None) -> ShardEntry:
    """Put a finished shard into the shared store and return its entry. local_path is consumed
    (moved in, or removed when the same bytes are there already). On object storage the shard is
    copied server-side from `staged_uri` (where a worker wrote it) when given, else uploaded; the
    staged object is deleted, and the local file moves into `cache` (a ShardSource's). Summary
    first, shard last: a listed shard always has its summary."""
    name = shard_name(local_path)
    rows = pq.read_metadata(local_path).num_rows
    dst = shard_uri(index_dir, table, name)
    if is_s3(index_dir):
        if not storage.exists(dst):
            summary = local_path + ".keys"
            pq.write_table(summarize(local_path, table), summary, compression="zstd")
            storage.upload_file(summary, summary_uri(index_dir, table, name))
            os.remove(summary)
            if staged_uri:
                storage.copy(staged_uri, dst)
            else:
                storage.upload_file(local_path, dst)
        if staged_uri:
            storage.delete(staged_uri)
        if cache:
            kept = shard_uri(cache, table, name)
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            os.replace(local_path, kept)
        else:
            os.remove(local_path)
        return ShardEntry(name, rows)
    folder = os.path.dirname(dst)
    os.makedirs(folder, exist_ok=True)
    if os.path.exists(dst):  # content-addressed: the same bytes are there already
        if not os.path.exists(summary_uri(index_dir, table, name)):
            _write_summary_local(index_dir, table, name, dst)
        os.remove(local_path)
        return ShardEntry(name, rows)
    _write_summary_local(index_dir, table, name, local_path)
    _fsync_file(local_path)
    os.replace(local_path, dst)  # same file system (staging is inside the index): atomic
    storage._fsync_dir(folder)
    return ShardEntry(name, rows)


def _write_summary_local(index_dir: str, table: str, name: str, shard_path: str) -> None:
    final = summary_uri(index_dir, table, name)
    tmp = final + f".tmp-{os.getpid()}"
    pq.write_table(summarize(shard_path, table), tmp, compression="zstd")
    _fsync_file(tmp)
    os.replace(tmp, final)


def adopt(index_dir: str, table: str, local_path: str, tmp_dir: str, remote_uri: Optional[str] = None) -> ShardEntry:
    """A shard of a version written before the shared store (in the version's own folder) put into
    the store without touching the version: hard-linked locally where possible, copied server-side
    on object storage (remote_uri: the version's own object; local_path: a local copy to hash)."""
    import shutil
    if is_s3(index_dir):
        return _adopt_s3(index_dir, table, local_path, remote_uri)
    os.makedirs(tmp_dir, exist_ok=True)
    tmp = os.path.join(tmp_dir, f"adopt-{table}-{os.path.basename(local_path)}")
    try:
        os.link(local_path, tmp)
    except OSError:
        shutil.copyfile(local_path, tmp)
    return store(index_dir, table, tmp)


def _adopt_s3(index_dir: str, table: str, tmp: str, remote_uri: Optional[str]) -> ShardEntry:
    name = shard_name(tmp)
    rows = pq.read_metadata(tmp).num_rows
    dst = shard_uri(index_dir, table, name)
    if not storage.exists(dst):
        summary = tmp + ".keys"
        pq.write_table(summarize(tmp, table), summary, compression="zstd")
        storage.upload_file(summary, summary_uri(index_dir, table, name))
        os.remove(summary)
        if remote_uri:
            storage.copy(remote_uri, dst)
        else:
            storage.upload_file(tmp, dst)
    return ShardEntry(name, rows)


# --- pruning ---------------------------------------------------------------------------------

def listed_names(manifests: Iterable[Optional[dict]]) -> dict[str, set[str]]:
    """table -> every shard name the given manifests list."""
    keep: dict[str, set[str]] = {t: set() for t in SHARED_TABLES}
    for m in manifests:
        for table, info in (listed_tables(m) or {}).items():
            keep.setdefault(table, set()).update(e["name"] for e in info.get("shards", []))
    return keep


def prune(index_dir: str, keep: dict[str, set[str]]) -> list[str]:
    """Delete the shards (and summaries, and left-over temp files) no kept version lists; returns
    what went, as table/name. Only names a run writes are touched."""
    removed = []
    root = storage.join(index_dir, SHARDS_DIR)
    for table in SHARED_TABLES:
        folder = storage.join(root, table)
        if is_s3(index_dir):
            base = folder.rstrip("/") + "/"
            present = [u[len(base):] for u in storage.list_files(base)]
        else:
            present = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
        for fname in present:
            name = fname.split(".", 1)[0]
            if "/" in fname or not NAME_RE.match(name):
                continue  # not a name a run writes
            whole = fname in (name + SHARD_SUFFIX, name + SUMMARY_SUFFIX)
            if whole and name in keep.get(table, set()):
                continue  # (a temp file of a killed write goes even when its shard is kept)
            storage.delete(storage.join(folder, fname))
            if fname.endswith(SHARD_SUFFIX) and not fname.endswith(SUMMARY_SUFFIX):
                removed.append(f"{table}/{name}")
    return removed
