"""The segment build step on a worker: one plan file -> one immutable segment.

A plan (transforms/index/segment_plan.py BuildItem) names the new segment's rows: a chunk_id
range of the version's fresh shards (deleted keys left out) and the live rows of merged old
segments. The worker reads only those (or, when several segments share the shards, the pieces
SplitShardFn cut each shard into, once), builds the segment (transforms/index/segments.py) and
stores it under INDEX/segments/<id>/ (uploaded, segment.json last, on object storage), then writes
`<plan>.done.json` with its meta for the driver.
"""
from __future__ import annotations

import json
import os
import tempfile
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.common import storage
from transforms.common.counters import counter
from transforms.common.s3 import is_s3
from transforms.index import shard_store
from transforms.index.segment_plan import BuildItem
from transforms.index.segment_store import index_meta_sha256, local_segment, upload_segment
from transforms.index.segments import (SEGMENTS_DIR, Segment, SegmentRows, check_segment, remember_verified,
                                       write_segment)


def as_segment_rows(t: pa.Table) -> SegmentRows:
    """Chunk rows (a shard's schema, perhaps from before a column existed: nulls) as SegmentRows."""
    from transforms.records import chunk_schema, embedding_dim
    if not t.num_rows:
        return _no_rows()
    schema = chunk_schema(embedding_dim(t.schema))
    for f in schema:  # shards written before a column existed (sentence vectors): nulls
        if f.name not in t.column_names:
            t = t.append_column(f, pa.nulls(t.num_rows, f.type))
    return SegmentRows.from_chunk_table(t.select(schema.names))


def _no_rows() -> SegmentRows:
    from transforms.records import chunk_schema
    return SegmentRows.from_chunk_table(pa.table({n: pa.array([], f.type) for n, f in
                                                  zip(chunk_schema(1).names, chunk_schema(1))}))


def deleted_keys(deletions: Optional[str]) -> dict[str, pa.Array]:
    """shard name -> keys deleted from it, from a (shard, key) Parquet file (None: nothing)."""
    if not deletions:
        return {}
    from transforms.index.shard_store import _group_keys, _read_parquet
    return _group_keys(_read_parquet(deletions))


def shard_of(uri: str) -> str:
    return os.path.basename(uri).split(".", 1)[0]


def in_range(t, lo: Optional[str], hi: Optional[str]):
    ids = t.column("chunk_id")
    if lo is None or hi is None:
        return t
    return t.filter(pc.and_(pc.greater_equal(ids, lo), pc.less_equal(ids, hi)))


def read_shard_rows(files: list[str], lo: Optional[str], hi: Optional[str],
                    deletions: Optional[str] = None) -> SegmentRows:
    """Live chunk rows with lo <= chunk_id <= hi from Parquet shards (downloaded first from S3),
    file by file: a worker holds its segment's rows and one file, never the shards whole."""
    deleted = deleted_keys(deletions)
    parts = []
    for f in files:
        t = in_range(shard_store.read_shard(f, "chunks", deleted.get(shard_of(f))), lo, hi)
        if t.num_rows:
            parts.append(as_segment_rows(t))
        del t
    return SegmentRows.concat(parts) if parts else _no_rows()


PIECE_SUFFIX = ".arrow"


class SplitShardFn(beam.DoFn):
    """shard uri -> (item number, piece uri) per build item that holds any of its rows: the shard
    is read once, its live rows cut by the items' chunk_id ranges into one piece file each
    (Arrow IPC, lz4) under `pieces_dir`/<item>/. A full build in many segments thus reads every
    shard once, not once per segment (chunk ids are random: every shard holds rows of every range)."""

    def __init__(self, ranges: list[tuple[str, str]], pieces_dir: str, deletions: Optional[str]):
        self.ranges, self.pieces_dir, self.deletions = ranges, pieces_dir, deletions
        self.split = counter("shards_split")

    def setup(self):
        self.deleted = deleted_keys(self.deletions)
        self.his = np.array([hi for _, hi in self.ranges], dtype=str)
        self.los = np.array([lo for lo, _ in self.ranges], dtype=str)

    def process(self, uri: str):
        name = shard_of(uri)
        writers: dict[int, tuple] = {}
        with tempfile.TemporaryDirectory(prefix="ragbeam-split-") as d:
            try:
                for batch in shard_store.live_batches(uri, "chunks", self.deleted.get(name), batch_size=4096):
                    ids = np.asarray(batch.column("chunk_id").to_numpy(zero_copy_only=False), dtype=str)
                    item = np.searchsorted(self.his, ids, side="left")
                    bad = (item >= len(self.his)) | (self.los[np.minimum(item, len(self.los) - 1)] > ids)
                    if bad.any():
                        raise RuntimeError(f"{uri}: chunk {ids[np.flatnonzero(bad)[0]]} is in no planned segment")
                    for i in np.unique(item):
                        rows = batch.filter(pa.array(item == i))
                        if int(i) not in writers:
                            path = os.path.join(d, f"{int(i):05d}{PIECE_SUFFIX}")
                            sink = pa.OSFile(path, "wb")
                            writers[int(i)] = (path, sink, pa.ipc.new_file(
                                sink, batch.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")))
                        writers[int(i)][2].write_batch(rows)
            finally:
                for _, sink, w in writers.values():
                    w.close()
                    sink.close()
            for i, (path, _, _) in sorted(writers.items()):
                dst = storage.join(self.pieces_dir, f"{i:05d}", name + PIECE_SUFFIX)
                if is_s3(dst):
                    storage.upload_file(path, dst)
                else:
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    os.replace(path, dst)
                yield i, dst
        self.split.inc()


def read_piece(uri: str) -> SegmentRows:
    with storage.open_local_or_download(uri) as local:
        with pa.memory_map(local, "r") as src:
            t = pa.ipc.open_file(src).read_all()
    return as_segment_rows(t)


class BuildSegmentFn(beam.DoFn):
    """plan file -> the segment it names, built on this worker and stored under INDEX/segments/."""

    def __init__(self, index_dir: str, namespace: str, ann=None):
        self.index_dir, self.namespace, self.ann = index_dir, namespace, ann  # ann: segments.AnnSpec or None
        self.built = counter("segments_built")

    def process(self, element):
        """element: a plan file's uri (the item reads its files itself), or (item number,
        {"plan": [uri], "pieces": [uris]}) when the shards were split first (SplitShardFn)."""
        if isinstance(element, str):
            plan_uri, pieces = element, None
        else:
            plan_uri, pieces = element[1]["plan"][0], sorted(element[1]["pieces"])
        item = BuildItem.from_json(json.loads(storage.read_text(plan_uri)))
        if pieces is not None:
            parts = [read_piece(u) for u in pieces]
        else:
            parts = [read_shard_rows(item.files, item.lo, item.hi, item.deletions)] if item.files else []
        for sid, rows in item.from_segments:
            local = local_segment(self.index_dir, sid, index_meta_sha256(self.index_dir, sid))
            check_segment(local, full=True)  # always hashed whole before its rows go into a merge
            parts.append(Segment(local).to_rows(np.asarray(rows, np.int64)))
        rows = SegmentRows.concat(parts)
        if rows.n != item.chunks:
            raise RuntimeError(f"{plan_uri}: planned {item.chunks} chunks, found {rows.n}")
        if is_s3(self.index_dir):
            with tempfile.TemporaryDirectory(prefix="ragbeam-seg-") as d:
                meta = write_segment(rows, d, self.namespace, ann=self.ann)
                upload_segment(os.path.join(d, meta["id"]), self.index_dir, meta["id"])
        else:
            meta = write_segment(rows, os.path.join(self.index_dir, SEGMENTS_DIR), self.namespace, ann=self.ann)
            remember_verified(os.path.join(self.index_dir, SEGMENTS_DIR, meta["id"]))  # its sha256s are fresh
        # the driver reads the ids back, and the sha256 of the segment.json the index now holds
        # (an upload is skipped where the same id is already there, perhaps from an older build)
        meta = {**meta, "meta_sha256": index_meta_sha256(self.index_dir, meta["id"])}
        storage.write_text(plan_uri + ".done.json", json.dumps(meta))
        self.built.inc()
        yield meta["id"]
