"""Parquet shards: the source of truth of an index version.

The pipeline writes a run's new rows here (<version>/<table>/part-*.parquet); the index job then
moves the chunks, documents and dead-letter shards into the shared store
(transforms/index/shard_store.py), which `read_table` reads through the version's manifest.
"""
from __future__ import annotations

import glob
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

CHUNKS_DIR = "chunks"
DOCUMENTS_DIR = "documents"
DEAD_LETTERS_DIR = "dead_letters"
NEAR_DUPLICATES_DIR = "near_duplicates"
SIGNATURES_DIR = "signatures"

# ~5k rows of 384-d vectors plus text is ~10-15 MB per row group: big enough to scan fast.
ROW_GROUP_BUFFER_BYTES = 32 * 1024 * 1024


class WriteShards(beam.PTransform):
    """Rows (dicts of `schema`) -> zstd Parquet files `<directory>/part-*.parquet`.

    Beam's file sink writes to a temporary location and renames on success, so
    a failed run leaves no partial shard under `directory`.
    """

    def __init__(self, directory: str, schema: pa.Schema, num_shards: int = 0):
        super().__init__()
        self.directory = directory
        self.schema = schema
        self.num_shards = num_shards

    def expand(self, rows):
        if self.directory.startswith("s3://"):
            return (rows
                    | "WriteParquet" >> beam.ParDo(_WriteParquetObjectsFn(self.directory, self.schema))
                    | "CollectShards" >> beam.combiners.ToList()
                    | "CommitShards" >> beam.ParDo(_CommitShardsFn(self.directory, self.schema)))
        return rows | "WriteParquet" >> beam.io.WriteToParquet(
            os.path.join(self.directory, "part"),
            schema=self.schema,
            codec="zstd",
            file_name_suffix=".parquet",
            num_shards=self.num_shards,
            row_group_buffer_size=ROW_GROUP_BUFFER_BYTES,
        )


def shard_files(version_dir: str, table: str) -> list[str]:
    return sorted(glob.glob(os.path.join(version_dir, table, "*.parquet")))


def read_table(version_dir: str, table: str, columns: list[str] | None = None) -> pa.Table:
    """Every live row of a version's table: the shared shards its manifest lists, deletions
    applied (transforms/index/shard_store.py), or the files in its own folder (tables a version
    keeps itself, and versions written before the shared store)."""
    from transforms.index import shard_store
    listing = shard_store.table_shards(version_dir, table) if table in shard_store.SHARED_TABLES else None
    if listing is not None:
        return shard_store.live_table(version_dir, table, columns, listing)
    files = shard_files(version_dir, table)
    if not files:
        raise FileNotFoundError(f"no {table} shards under {version_dir}")
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files])


# Object storage: each bundle's rows are written to a local Parquet file in the worker and
# uploaded under <directory>/_temporary/; once every bundle is done, one step copies the
# committed bundles' files to <directory>/part-*.parquet and drops _temporary/ (files of
# retried bundles stay there and go with it), as Beam's own file sink does. No shared disk.
TEMP_DIR = "_temporary"
ROWS_PER_FILE = 20000


def _write_local_parquet(rows: list, schema: pa.Schema, path: str) -> None:
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path, compression="zstd")


class _WriteParquetObjectsFn(beam.DoFn):
    def __init__(self, directory: str, schema: pa.Schema):
        self.directory, self.schema = directory, schema

    def start_bundle(self):
        self.rows = []

    def process(self, row):
        self.rows.append(row)
        if len(self.rows) >= ROWS_PER_FILE:
            yield self._flush()

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindow
        from apache_beam.utils.windowed_value import WindowedValue
        if self.rows:
            yield WindowedValue(self._flush(), 0, [GlobalWindow()])

    def _flush(self) -> str:
        import tempfile
        import uuid
        from transforms.common import storage
        name = f"{uuid.uuid4().hex}.parquet"
        with tempfile.TemporaryDirectory(prefix="ragbeam-shard-") as tmp:
            local = os.path.join(tmp, name)
            _write_local_parquet(self.rows, self.schema, local)
            uri = storage.join(self.directory, TEMP_DIR, name)
            storage.upload_file(local, uri)
        self.rows = []
        return uri


class _CommitShardsFn(beam.DoFn):
    def __init__(self, directory: str, schema: pa.Schema):
        self.directory, self.schema = directory, schema

    def process(self, uris):
        import tempfile
        from transforms.common import storage
        uris = sorted(uris)
        n = max(len(uris), 1)
        for i, uri in enumerate(uris):
            storage.copy(uri, storage.join(self.directory, f"part-{i:05d}-of-{n:05d}.parquet"))
        if not uris:  # like Beam's sink: an empty table is one empty shard, so readers find its schema
            with tempfile.TemporaryDirectory(prefix="ragbeam-shard-") as tmp:
                local = os.path.join(tmp, "empty.parquet")
                _write_local_parquet([], self.schema, local)
                storage.upload_file(local, storage.join(self.directory, "part-00000-of-00001.parquet"))
        storage.delete_tree(storage.join(self.directory, TEMP_DIR))
        yield len(uris)
