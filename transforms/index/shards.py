"""Parquet shards: the source of truth of an index version."""
from __future__ import annotations

import glob
import os

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq

CHUNKS_DIR = "chunks"
DOCUMENTS_DIR = "documents"
DEAD_LETTERS_DIR = "dead_letters"

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
    files = shard_files(version_dir, table)
    if not files:
        raise FileNotFoundError(f"no {table} shards under {version_dir}")
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files])
