"""SQL over one published index version: DuckDB views over its Parquet tables.

`create_views` makes one view per table of a local version dir (chunks, documents, dead_letters,
near_duplicates, sources), each exactly the version's live rows: over the shared shards its
manifest's `tables` lists (INDEX/shards/<table>/, transforms/index/shard_store.py) without the
keys its deletions file records, or, for a table the version keeps in its own folder (sources,
near_duplicates, and every table of a version written before the shared store), over that
folder's shards; files named when the view is made, by absolute path. Plus a one-row table
`manifest` (version, version_dir, manifest JSON).
`write_catalog` writes the same into a DuckDB file that any DuckDB client opens; its views read
the files in place, so it works while the version is kept (`index.keep_versions`).
"""
from __future__ import annotations

import json
import os

import pyarrow as pa

from transforms.index import shard_store
from transforms.index.incremental import SOURCES_DIR
from transforms.index.shards import (CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR, NEAR_DUPLICATES_DIR,
                                     shard_files)
from transforms.ingest.neardup import NEAR_DUPLICATES_SCHEMA
from transforms.records import DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, SOURCE_SCHEMA

# view -> (the version's folder of shards, the schema of the empty table a version without
# shards gets; None: a version always has them)
TABLES = {
    "chunks": (CHUNKS_DIR, None),
    "documents": (DOCUMENTS_DIR, DOCUMENT_SCHEMA),
    "dead_letters": (DEAD_LETTERS_DIR, DEAD_LETTER_SCHEMA),
    "near_duplicates": (NEAR_DUPLICATES_DIR, NEAR_DUPLICATES_SCHEMA),
    "sources": (SOURCES_DIR, SOURCE_SCHEMA),
}
MANIFEST_TABLE = "manifest"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _shared_view(version_dir: str, table: str, info: dict) -> str:
    """The SELECT of a shared table's live rows: its listed shards, less the (shard, key) pairs of
    the version's deletions (a key as shard_store.row_keys makes it)."""
    index_dir = shard_store.index_of(version_dir)
    files = ", ".join(_literal(shard_store.shard_uri(index_dir, table, e["name"])) for e in info.get("shards", []))
    # union_by_name: shards written before a column existed read it as NULL
    rows = f"read_parquet([{files}], union_by_name = true, filename = '_shard_file')"
    if not info.get("deletions"):
        return f"SELECT * EXCLUDE (_shard_file) FROM {rows}"
    key = " || chr(31) || ".join(f"coalesce(CAST(r.{c} AS VARCHAR), '')" for c in shard_store.KEY_COLUMNS[table])
    deleted = _literal(os.path.join(version_dir, info["deletions"]))
    return (f"SELECT r.* EXCLUDE (_shard_file) FROM {rows} AS r WHERE NOT EXISTS (SELECT 1 FROM "
            f"read_parquet({deleted}) AS d WHERE d.shard = parse_filename(r._shard_file, true) AND d.key = {key})")


def create_views(con, version_dir: str, manifest: dict) -> list[str]:
    """The version's views (and the manifest table) in `con`; returns their names in order."""
    version_dir = os.path.abspath(version_dir)
    shared = shard_store.listed_tables(manifest) or {}
    for name, (folder, schema) in TABLES.items():
        files = shard_files(version_dir, folder)
        if shared.get(folder, {}).get("shards"):
            con.execute(f"CREATE VIEW {name} AS {_shared_view(version_dir, folder, shared[folder])}")
        elif files and folder not in shared:
            listed = ", ".join(_literal(f) for f in files)
            # union_by_name: shards written before a column existed read it as NULL
            con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{listed}], union_by_name = true)")
        elif schema is not None:
            con.register("_empty", pa.table({n: pa.array([], t) for n, t in zip(schema.names, schema.types)}))
            con.execute(f"CREATE TABLE {name} AS SELECT * FROM _empty")
            con.unregister("_empty")
        else:
            raise FileNotFoundError(f"{version_dir}: no {folder} shards (not a complete index version)")
    con.execute(f"CREATE TABLE {MANIFEST_TABLE} AS SELECT ? AS version, ? AS version_dir, ?::JSON AS manifest",
                [manifest.get("version", os.path.basename(version_dir)), version_dir, json.dumps(manifest)])
    return list(TABLES) + [MANIFEST_TABLE]


def write_catalog(version_dir: str, manifest: dict, path: str) -> list[str]:
    """A DuckDB file at `path` holding the version's views; written whole, then renamed into place."""
    from transforms.common.duck import connect
    tmp = path + ".tmp"
    for p in (tmp, tmp + ".wal"):  # leftovers of a run killed while writing
        if os.path.exists(p):
            os.remove(p)
    con = connect(tmp, extensions=())
    try:
        names = create_views(con, version_dir, manifest)
        con.execute("CHECKPOINT")
    except BaseException:
        con.close()
        os.remove(tmp)
        raise
    con.close()
    os.replace(tmp, path)
    return names
