"""The segment build step on a worker: one plan file -> one immutable segment.

A plan (transforms/index/segment_plan.py BuildItem) names the new segment's rows: a chunk_id
range of the version's fresh shards and the live rows of merged old segments. The worker reads
only those, builds the segment (transforms/index/segments.py) and stores it under
INDEX/segments/<id>/ (uploaded, segment.json last, on object storage), then writes
`<plan>.done.json` with its meta for the driver.
"""
from __future__ import annotations

import json
import os
import tempfile

import apache_beam as beam
import numpy as np

from transforms.common import storage
from transforms.common.counters import counter
from transforms.common.s3 import is_s3
from transforms.index.segment_plan import BuildItem
from transforms.index.segment_store import index_meta_sha256, local_segment, upload_segment
from transforms.index.segments import (SEGMENTS_DIR, Segment, SegmentRows, check_segment, remember_verified,
                                       write_segment)


def read_shard_rows(files: list[str], lo: str, hi: str) -> SegmentRows:
    """Chunk rows with lo <= chunk_id <= hi from Parquet shards (downloaded first from S3), read
    file by file with the filter pushed into the reader: a worker holds its segment's rows and one
    file's matching row groups, never the shards whole."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transforms.records import chunk_schema, embedding_dim
    parts = []
    with tempfile.TemporaryDirectory(prefix="ragbeam-seg-") as d:
        for i, f in enumerate(files):
            local = f
            if is_s3(f):
                local = os.path.join(d, f"{i:05d}.parquet")
                storage.download_file(f, local)
            t = pq.read_table(local, filters=[("chunk_id", ">=", lo), ("chunk_id", "<=", hi)])
            if is_s3(f):
                os.remove(local)
            if not t.num_rows:
                continue
            schema = chunk_schema(embedding_dim(t.schema))
            for field in schema:  # shards written before a column existed (sentence vectors): nulls
                if field.name not in t.column_names:
                    t = t.append_column(field, pa.nulls(t.num_rows, field.type))
            parts.append(SegmentRows.from_chunk_table(t.select(schema.names)))
            del t
    if not parts:
        return SegmentRows.from_chunk_table(pa.table({n: pa.array([], f.type) for n, f in
                                                      zip(chunk_schema(1).names, chunk_schema(1))}))
    return SegmentRows.concat(parts)


class BuildSegmentFn(beam.DoFn):
    """plan file -> the segment it names, built on this worker and stored under INDEX/segments/."""

    def __init__(self, index_dir: str, namespace: str):
        self.index_dir, self.namespace = index_dir, namespace
        self.built = counter("segments_built")

    def process(self, plan_uri: str):
        item = BuildItem.from_json(json.loads(storage.read_text(plan_uri)))
        parts = [read_shard_rows(item.files, item.lo, item.hi)] if item.files else []
        for sid, rows in item.from_segments:
            local = local_segment(self.index_dir, sid, index_meta_sha256(self.index_dir, sid))
            check_segment(local, full=True)  # always hashed whole before its rows go into a merge
            parts.append(Segment(local).to_rows(np.asarray(rows, np.int64)))
        rows = SegmentRows.concat(parts)
        if rows.n != item.chunks:
            raise RuntimeError(f"{plan_uri}: planned {item.chunks} chunks, found {rows.n}")
        if is_s3(self.index_dir):
            with tempfile.TemporaryDirectory(prefix="ragbeam-seg-") as d:
                meta = write_segment(rows, d, self.namespace)
                upload_segment(os.path.join(d, meta["id"]), self.index_dir, meta["id"])
        else:
            meta = write_segment(rows, os.path.join(self.index_dir, SEGMENTS_DIR), self.namespace)
            remember_verified(os.path.join(self.index_dir, SEGMENTS_DIR, meta["id"]))  # its sha256s are fresh
        # the driver reads the ids back, and the sha256 of the segment.json the index now holds
        # (an upload is skipped where the same id is already there, perhaps from an older build)
        meta = {**meta, "meta_sha256": index_meta_sha256(self.index_dir, meta["id"])}
        storage.write_text(plan_uri + ".done.json", json.dumps(meta))
        self.built.inc()
        yield meta["id"]
