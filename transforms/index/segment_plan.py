"""Which segments a new version lists: reuse, tombstones, new segments and tiered merges.

The driver decides from each live segment's tombstones in the new version (pipelines/segments.py
finds them from the segment's key summary: the rows of documents that are gone or were processed
again) and reads chunk ids only of the segments it merges, never vectors:
- a live segment's row stays live unless it is tombstoned;
- fresh rows (the pipeline's shards) go into new segments, cut by chunk_id into
  ceil(n / segment_max_chunks) equal parts;
- merge policy (tiered, as Lucene's TieredMergePolicy): a segment whose tombstones exceed
  merge_max_deleted_fraction of its rows is rewritten; segments (and the fresh rows) are put in
  size tiers (merge_floor_chunks, then x merge_factor per tier) and once a tier holds
  merge_factor of them they are merged into one. Segments of at least half segment_max_chunks
  are merged only for their tombstones.
A build item names where its rows come from (a chunk_id range of shard files, with the keys
deleted from them, and live rows of old segments) and is carried out by a worker
(pipelines/segments.py).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass
class MergePolicy:
    segment_max_chunks: int = 250_000
    merge_factor: int = 8
    merge_floor_chunks: int = 10_000
    max_deleted_fraction: float = 0.3

    def tier(self, live: int) -> int:
        if live <= self.merge_floor_chunks:
            return 0
        return 1 + int(math.log(live / self.merge_floor_chunks, self.merge_factor))


@dataclass
class BuildItem:
    """One new segment's rows: shard rows with lo <= chunk_id <= hi, plus live rows of old segments."""
    files: list[str] = field(default_factory=list)
    lo: Optional[str] = None
    hi: Optional[str] = None
    from_segments: list[tuple[str, list[int]]] = field(default_factory=list)  # (segment id, local rows)
    chunks: int = 0
    deletions: Optional[str] = None  # a (shard, key) Parquet file: keys deleted from the files, by shard name

    def to_json(self) -> dict:
        return {"files": self.files, "lo": self.lo, "hi": self.hi, "chunks": self.chunks,
                "from_segments": [[s, rows] for s, rows in self.from_segments], "deletions": self.deletions}

    @classmethod
    def from_json(cls, d: dict) -> "BuildItem":
        return cls(d["files"], d["lo"], d["hi"], [(s, list(r)) for s, r in d["from_segments"]], d["chunks"],
                   d.get("deletions"))


@dataclass
class SegmentPlan:
    keep: dict[str, np.ndarray]  # live segment id -> its tombstoned local rows in the new version
    build: list[BuildItem]
    merged: list[str]  # live segments rewritten into new ones (not listed by the new version)
    dropped: list[str]  # live segments with no live row left

    def summary(self) -> dict:
        return {"reused": len(self.keep), "built": len(self.build), "merged": len(self.merged),
                "dropped": len(self.dropped),
                "tombstones": int(sum(len(d) for d in self.keep.values()))}


def _cuts(sorted_ids: pa.Array, max_chunks: int) -> list[tuple[str, str, int]]:
    """(lo, hi, count) ranges of sorted ids in ceil(n / max) equal parts."""
    n = len(sorted_ids)
    if n == 0:
        return []
    k = math.ceil(n / max_chunks)
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [(sorted_ids[a].as_py(), sorted_ids[b - 1].as_py(), b - a) for a, b in zip(bounds, bounds[1:])]


def plan_segments(fresh_files: list[str], fresh_ids: pa.Array, live_segments: list[tuple[str, int, np.ndarray]],
                  policy: MergePolicy, ids_of: Optional[Callable[[str], pa.Array]] = None,
                  deletions: Optional[str] = None) -> SegmentPlan:
    """live_segments: (id, its rows, its tombstoned local rows in the new version) per live segment;
    ids_of(id): a segment's chunk_id column, asked only of the segments merged. With no live
    segment every row of the version is fresh (fresh_files: every chunk shard)."""
    fresh_ids = pc.unique(fresh_ids)
    keep: dict[str, np.ndarray] = {}
    live_count: dict[str, int] = {}
    dead_of: dict[str, np.ndarray] = {}
    for sid, n, dead in live_segments:
        dead_of[sid] = np.unique(np.asarray(dead, np.int64))
        live_count[sid] = int(n) - len(dead_of[sid])
    size = {sid: int(n) for sid, n, _ in live_segments}
    dropped = [s for s, n in live_count.items() if n == 0]
    rewrite = {s for s, _, _ in live_segments if live_count[s] and
               len(dead_of[s]) > policy.max_deleted_fraction * (live_count[s] + len(dead_of[s]))}
    # tiers over what remains: kept segments below half the maximum, and the fresh rows as one
    n_fresh = len(fresh_ids)
    small = [s for s, _, _ in live_segments if live_count[s] and s not in rewrite
             and live_count[s] < policy.segment_max_chunks // 2]
    tiers: dict[int, list[str]] = {}
    for s in small:
        tiers.setdefault(policy.tier(live_count[s]), []).append(s)
    merge: set[str] = set(rewrite)
    fresh_tier = policy.tier(n_fresh) if n_fresh else None
    for t, members in tiers.items():
        count = len(members) + (1 if fresh_tier == t else 0)
        if count >= policy.merge_factor:
            merge.update(members)
    for s, _, _ in live_segments:
        if live_count[s] and s not in merge:
            keep[s] = dead_of[s]
    build: list[BuildItem] = []
    # merged segments' live rows and the fresh rows are cut together by chunk_id
    pool = [pa.chunked_array([fresh_ids], pa.string())]
    ids_of_merged = {s: ids_of(s) for s in sorted(merge)} if merge else {}
    alive_of = {s: np.setdiff1d(np.arange(size[s]), dead_of[s]) for s in merge}
    for s in sorted(merge):
        pool.append(pa.chunked_array([ids_of_merged[s].take(pa.array(alive_of[s]))]))
    all_ids = pa.concat_arrays([c.combine_chunks() for c in pool if len(c)]) if any(len(c) for c in pool) \
        else pa.array([], pa.string())
    sorted_ids = all_ids.take(pc.sort_indices(all_ids)) if len(all_ids) else all_ids
    for lo, hi, count in _cuts(sorted_ids, policy.segment_max_chunks):
        item = BuildItem(list(fresh_files) if n_fresh else [], lo, hi, [], count, deletions if n_fresh else None)
        for s in sorted(merge):
            ids = ids_of_merged[s]
            in_range = pc.and_(pc.greater_equal(ids, lo), pc.less_equal(ids, hi))
            rows = np.setdiff1d(np.flatnonzero(np.asarray(in_range.to_numpy(zero_copy_only=False), bool)),
                                dead_of[s])
            if len(rows):
                item.from_segments.append((s, rows.tolist()))
        build.append(item)
    return SegmentPlan(keep, build, sorted(merge), dropped)


def tombstones_file(version_dir: str, sid: str) -> str:
    return os.path.join(version_dir, "segment_stats", sid, "dead.npy")


def df_file(version_dir: str, sid: str) -> str:
    return os.path.join(version_dir, "segment_stats", sid, "df.npy")
