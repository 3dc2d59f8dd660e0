"""The segment step of the index job: workers build the new segments, the driver lists them.

After the index job has listed a version's shards (transforms/index/incremental.py: the live
ones it keeps, with the documents gone or processed again recorded as deleted keys, and this
run's new ones), the driver plans (transforms/index/segment_plan.py): each live segment's new
tombstones come from its key summary (keys.arrow: the rows of the gone documents), never from
every segment's ids; it writes one plan file per new segment into the staging dir, and a second
Beam pipeline builds each new segment on a worker (rows read from this run's shards and from
merged old segments, never from the whole corpus) into INDEX/segments/<id>/. Where several new
segments share shards (a full build) each shard is read once and cut by chunk_id range first
(segment_build.SplitShardFn). The driver then writes the version's tombstones and corpus-wide
BM25 statistics (transforms/index/segment_stats.py) and returns the manifest's `segments` and
`bm25`. Pruning removes the segments and shards no kept version lists.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3
from transforms.index import shard_store
from transforms.index.incremental import CARRIED_FILE
from transforms.index.segment_plan import MergePolicy, plan_segments
from transforms.index.segment_stats import read_dead_df, rows_dead_df, write_version_stats
from transforms.index.segment_store import SegmentMismatch, segment_files, segment_uri
from transforms.index.segment_build import BuildSegmentFn, SplitShardFn, shard_of
from transforms.index.segments import (IDS_FILE, KEYS_FILE, META_FILE, SEGMENTS_DIR, Segment, SegmentCorrupt,
                                       SegmentFormatError, analysis_fingerprint, ann_fingerprint_of, ann_spec)
from transforms.index.shards import CHUNKS_DIR, shard_files

PLAN_DIR = "_segments_plan"
PIECES_DIR = "_segments_pieces"  # a full build's shards cut by segment, each shard read once
REBUILD_DIR = "_segments_rebuild"  # the carried rows of corrupt or stale live segments, built again as fresh rows
# what the driver reads of a segment: its key summary to tombstone (ids.arrow only for segments
# built before keys.arrow, and for merges), vocabulary and lengths for the statistics, and the
# postings of a segment with tombstones (their df); never vectors, sentences or text
PLAN_FILES = (KEYS_FILE,)
STATS_FILES = ("terms.arrow", "doc_len.npy")
TOMBSTONE_FILES = ("post_ptr.npy", "post_doc.npy")


def _driver_segment(index_dir: str, sid: str, names, meta_sha256: Optional[str] = None) -> Segment:
    seg = Segment(segment_files(index_dir, sid, names, meta_sha256))
    if IDS_FILE in names and IDS_FILE not in seg.meta.get("files", {}):  # a segment from before ids.arrow
        seg = Segment(segment_files(index_dir, sid, [*names, "rows.arrow"], meta_sha256))
    return seg


def policy_from_config(cfg) -> MergePolicy:
    i = cfg.index
    return MergePolicy(segment_max_chunks=i.segment_max_chunks, merge_factor=i.merge_factor,
                       merge_floor_chunks=i.merge_floor_chunks, max_deleted_fraction=i.merge_max_deleted_fraction)


def _ids(files: list[str], deleted: Optional[dict] = None) -> pa.Array:
    deleted = deleted or {}
    cols = [shard_store.read_shard(f, "chunks", deleted.get(shard_of(f)), ["chunk_id"]).column(0).combine_chunks()
            for f in files]
    return pa.concat_arrays(cols) if cols else pa.array([], pa.string())


@dataclass
class _ChunkShards:
    """The version's chunk shards as the segment step sees them: (driver path, worker uri) of the
    shards holding this run's rows, and of the others (with the keys deleted from them)."""
    fresh: list[tuple[str, str]]
    other: list[tuple[str, str]]
    deleted: dict[str, pa.Array]  # shard name -> deleted keys
    gone_keys: Optional[pa.Array]  # chunk keys gone since the live version; None: plan from chunk ids

    @classmethod
    def listed(cls, index_dir: str, work_dir: str, shards) -> "_ChunkShards":
        ts = shards.tables[CHUNKS_DIR]
        source = shard_store.ShardSource(index_dir, cache=shard_store.index_of(work_dir) if is_s3(index_dir) else None)
        fresh_names = set(shards.fresh_chunks)
        pair = lambda e: (_Lazy(source, e.name), shard_store.shard_uri(index_dir, CHUNKS_DIR, e.name))  # noqa: E731
        return cls([pair(e) for e in ts.entries if e.name in fresh_names],
                   [pair(e) for e in ts.entries if e.name not in fresh_names], dict(ts.deleted), shards.gone_chunk_keys)

    @classmethod
    def in_folder(cls, work_dir: str, out_dir: str) -> "_ChunkShards":
        """A version that keeps its chunk shards in its own folder (written before the shared
        store, or by bench/): part-* are this run's rows, CARRIED_FILE the carried ones."""
        files = shard_files(work_dir, CHUNKS_DIR)
        return cls([(f, f) for f in files if os.path.basename(f) != CARRIED_FILE],
                   [(f, f) for f in files if os.path.basename(f) == CARRIED_FILE], {}, None)

    def paths(self, which) -> list[str]:
        return [str(p) for p, _ in which]


class _Lazy(os.PathLike):
    """A shard's local path, fetched into the driver's cache only when something reads it."""
    def __init__(self, source, name):
        self.source, self.name = source, name

    def __fspath__(self) -> str:
        return self.source.path(CHUNKS_DIR, self.name)

    __str__ = __fspath__


def _old_tombstones(live_dir: Optional[str], entry: dict) -> np.ndarray:
    """A live segment's tombstones in the live version (segment_stats/<id>/dead.npy), read once."""
    if not live_dir or not entry.get("deleted"):
        return np.zeros(0, np.int64)
    if "_dead" not in entry:
        import io
        uri = storage.join(live_dir, "segment_stats", entry["id"], "dead.npy")
        entry["_dead"] = np.asarray(np.load(io.BytesIO(storage.read_bytes(uri))), np.int64)
    return entry["_dead"]


def segment_version(index_dir: str, work_dir: str, out_dir: str, cfg, spec, live_manifest: Optional[dict],
                    *, beam_args: Optional[list[str]] = None, log=print, shards=None,
                    live_dir: Optional[str] = None) -> dict:
    """Plan, build (in Beam) and list the version's segments. work_dir: the driver's local copy of
    the version; out_dir: the same version where workers read it (local or S3); shards: its shards
    (transforms/index/incremental.VersionShards; without it, those work_dir's manifest lists, none
    fresh, or for a version without `tables` the chunk shards in work_dir's own folder); live_dir:
    the live version (its tombstones)."""
    from pipelines.options import pipeline_options
    t0 = time.perf_counter()
    remote = is_s3(index_dir)
    if shards is None:
        shards = listed_shards(work_dir)
    src = _ChunkShards.listed(index_dir, work_dir, shards) if shards is not None else \
        _ChunkShards.in_folder(work_dir, out_dir)
    live_list = [dict(s) for s in (live_manifest or {}).get("segments") or []]  # (their tombstones cached in them)
    healthy: list[tuple[Segment, dict]] = []
    corrupt, stale = [], []
    analysis = analysis_fingerprint()
    ann = ann_spec(cfg.index)
    for s in live_list:
        try:
            seg = _driver_segment(index_dir, s["id"], PLAN_FILES, s.get("meta_sha256"))
        except (SegmentCorrupt, SegmentFormatError, SegmentMismatch) as e:
            log(f"ragbeam index: {str(e).split('; run `ragbeam')[0]}: building its rows again")
            corrupt.append(s["id"])
            continue
        if seg.meta.get("analysis") != analysis:  # terms or words of another analysis (or unrecorded): not reusable
            log(f"ragbeam index: segment {seg.id} was analysed by another tokenizer, stemmer or stopword list: "
                "building its rows again")
            stale.append(seg.id)
            continue
        if ann_fingerprint_of(seg.meta) != (ann.fingerprint() if ann else None):  # index.ann / hnsw_* changed
            log(f"ragbeam index: segment {seg.id} was built with another ANN setting "
                f"({ann_fingerprint_of(seg.meta) or 'no graph'}, now {ann.fingerprint() if ann else 'no graph'}): "
                "building its rows again")
            stale.append(seg.id)
            continue
        healthy.append((seg, s))
    sha_of = {s["id"]: s.get("meta_sha256") for s in live_list}
    ids_cache: dict[str, pa.Array] = {}

    def ids_of(sid: str) -> pa.Array:  # read only where the keys do not do (old segments, merges)
        if sid not in ids_cache:
            ids_cache[sid] = _driver_segment(index_dir, sid, (IDS_FILE,), sha_of.get(sid)).chunk_ids()
        return ids_cache[sid]
    carried: list[pa.Array] = []

    def carried_ids() -> pa.Array:  # every live chunk id not of this run (segments without keys.arrow)
        if not carried:
            carried.append(_ids(src.paths(src.other), src.deleted))
        return carried[0]
    fresh_paths = src.paths(src.fresh)
    fresh_ids = _ids(fresh_paths) if healthy else pa.array([], pa.string())
    live_segments = []
    for seg, entry in healthy:
        dead = seg.rows_of_keys(src.gone_keys) if src.gone_keys is not None else None
        if dead is not None:  # its key summary: the rows of documents gone or processed again
            dead = np.union1d(_old_tombstones(live_dir, entry), dead).astype(np.int64)
        else:  # from chunk ids: live and not processed again
            ids = ids_of(seg.id)
            alive = pc.and_(pc.is_in(ids, value_set=carried_ids()), pc.invert(pc.is_in(ids, value_set=fresh_ids)))
            dead = np.flatnonzero(~np.asarray(alive.to_numpy(zero_copy_only=False), bool)).astype(np.int64)
        live_segments.append((seg.id, seg.n, dead))

    rebuild_files: list[str] = []
    if corrupt:
        for sid in corrupt:  # never reused, and gone before a build of the same rows could reuse it
            if remote:
                storage.delete_tree(segment_uri(index_dir, sid).rstrip("/") + "/")
            else:
                import shutil
                shutil.rmtree(os.path.join(index_dir, SEGMENTS_DIR, sid), ignore_errors=True)
    if (corrupt or stale) and live_segments:  # the carried rows no reused segment holds: built again as fresh rows
        held = [ids_of(sid).take(pa.array(np.setdiff1d(np.arange(n), dead))) for sid, n, dead in live_segments]
        rebuild_files = _orphan_rows(src, pa.concat_arrays(held), work_dir, out_dir, remote)
    deletions = None
    if live_segments:
        files = [u for _, u in src.fresh] + rebuild_files
        fresh_ids = pa.concat_arrays([fresh_ids, _ids([os.path.join(work_dir, REBUILD_DIR, os.path.basename(f))
                                                       for f in rebuild_files])])
    else:  # every live row of the version is built
        files = [u for _, u in src.fresh + src.other]
        fresh_ids = _ids(fresh_paths + src.paths(src.other), src.deleted)
        deletions = _deletions_for_workers(src.deleted, out_dir)
    plan = plan_segments(files, fresh_ids, live_segments, policy_from_config(cfg), ids_of, deletions)
    t_plan = time.perf_counter()
    built: list[dict] = []
    if plan.build:
        plan_dir = storage.join(out_dir, PLAN_DIR)
        names = []
        for i, item in enumerate(plan.build):
            uri = storage.join(plan_dir, f"segment-{i:05d}.json")
            storage.write_text(uri, json.dumps(item.to_json()))
            names.append(uri)
        log(f"ragbeam index: building {len(names)} segment(s), reusing {len(plan.keep)} "
            f"({plan.summary()['tombstones']} tombstones), merging {len(plan.merged)}")
        split = [i for i, item in enumerate(plan.build) if item.files]
        pieces_dir = storage.join(out_dir, PIECES_DIR)
        with beam.Pipeline(options=pipeline_options(cfg, beam_args)) as p:
            if len(split) > 1:  # several segments share the shards: each shard is read once, cut by range
                ranges = [(plan.build[i].lo, plan.build[i].hi) for i in range(len(plan.build))]
                plans = p | "SegmentPlans" >> beam.Create(list(enumerate(names)))
                pieces = (p | "ShardsToSplit" >> beam.Create(files).with_output_types(str)
                            | "SpreadShards" >> beam.Reshuffle()
                            | "SplitShards" >> beam.ParDo(SplitShardFn(ranges, pieces_dir, deletions)))
                ({"plan": plans, "pieces": pieces}
                 | "PiecesPerSegment" >> beam.CoGroupByKey()
                 | "SpreadSegments" >> beam.Reshuffle()
                 | "BuildSegment" >> beam.ParDo(BuildSegmentFn(index_dir, spec.namespace, ann)))
            else:
                (p | "SegmentPlans" >> beam.Create(names).with_output_types(str)
                   | "SpreadSegments" >> beam.Reshuffle()
                   | "BuildSegment" >> beam.ParDo(BuildSegmentFn(index_dir, spec.namespace, ann)))
        built = [json.loads(storage.read_text(n + ".done.json")) for n in names]
        storage.delete_tree(plan_dir)
        storage.delete_tree(pieces_dir)
    if rebuild_files:
        storage.delete_tree(storage.join(out_dir, REBUILD_DIR))
        if remote:
            import shutil
            shutil.rmtree(os.path.join(work_dir, REBUILD_DIR), ignore_errors=True)
    t_build = time.perf_counter()
    listed: list[tuple] = []
    entry_of = {s["id"]: s for s in live_list}
    with _Stemmer() as stemmer:
        for sid, dead in plan.keep.items():
            seg = _driver_segment(index_dir, sid, STATS_FILES, sha_of.get(sid))
            known = _dead_df_since_live(index_dir, seg, dead, live_dir, entry_of.get(sid, {}), stemmer)
            if known is None:  # counted from the postings (a live version from before dead_df.npy)
                seg = _driver_segment(index_dir, sid, STATS_FILES + TOMBSTONE_FILES, sha_of.get(sid))
            listed.append((seg, dead, known))
    for meta in built:
        seg = _driver_segment(index_dir, meta["id"], STATS_FILES, meta.get("meta_sha256"))
        listed.append((seg, np.zeros(0, np.int64), np.zeros(int(seg.meta["terms"]), np.int64)))
    listed.sort(key=lambda sd: (sd[0].meta.get("min_chunk_id") or "", sd[0].id))
    if len({s.id for s, _, _ in listed}) != len(listed):
        raise RuntimeError("a segment is listed twice: " + ", ".join(s.id for s, _, _ in listed))
    bm25 = write_version_stats(work_dir, listed)
    segments = [{"id": s.id, "chunks": s.n, "live": s.n - len(d), "deleted": int(len(d)),
                 "meta_sha256": storage.sha256_file(os.path.join(s.dir, META_FILE))} for s, d, _ in listed]
    t_end = time.perf_counter()
    return {"segments": segments, "bm25": bm25,
            "segment_plan": {**plan.summary(), "built_ids": [m["id"] for m in built], "rebuilt_corrupt": len(corrupt),
                             "rebuilt_stale": len(stale)},
            "artifact_s": round(t_end - t0, 3), "plan_s": round(t_plan - t0, 3),
            "build_s": round(t_build - t_plan, 3), "stats_s": round(t_end - t_build, 3)}


class _Stemmer:
    """One DuckDB connection (its stemmer) for every segment's tombstoned rows, opened on first use."""
    def __enter__(self):
        self.con = None
        return self

    def get(self):
        if self.con is None:
            from transforms.common.duck import connect
            self.con = connect(":memory:", memory_limit="256MB")
        return self.con

    def __exit__(self, *exc):
        if self.con is not None:
            self.con.close()


def _dead_df_since_live(index_dir: str, seg: Segment, dead: np.ndarray, live_dir: Optional[str], entry: dict,
                        stemmer: _Stemmer) -> Optional[np.ndarray]:
    """The BM25 df of a kept segment's tombstoned rows: the live version's (dead_df.npy) plus that
    of the rows tombstoned tonight, analysed again from rows.arrow (memory-mapped: only those rows
    are read). None where that cannot be told so (then the postings count them: on object storage,
    and after a live version without dead_df.npy)."""
    T = int(seg.meta["terms"])
    if not len(dead):
        return np.zeros(T, np.int64)
    old = _old_tombstones(live_dir, entry)
    if not np.isin(old, dead).all():
        return None
    base = np.zeros(T, np.int64) if not len(old) else read_dead_df(live_dir, seg.id, T) if live_dir else None
    if base is None:
        return None
    new = np.setdiff1d(dead, old)
    if not len(new):
        return base
    if is_s3(index_dir):  # a driver never downloads a segment's text: the postings count them
        return None
    got = rows_dead_df(seg, new, stemmer.get())  # a local segment: rows.arrow memory-mapped
    return None if got is None else base + got


def _deletions_for_workers(deleted: dict[str, pa.Array], out_dir: str) -> Optional[str]:
    """The keys deleted from the shards a full build reads, where the workers read them."""
    if not any(len(k) for k in deleted.values()):
        return None
    import tempfile
    with tempfile.TemporaryDirectory(prefix="ragbeam-del-") as d:
        shard_store.write_deletions(d, CHUNKS_DIR, deleted)
        uri = storage.join(out_dir, PLAN_DIR, "deleted-chunks.parquet")
        storage.upload_file(shard_store.deletions_path(d, CHUNKS_DIR), uri)
    return uri


def _orphan_rows(src: _ChunkShards, held: pa.Array, work_dir: str, out_dir: str, remote: bool) -> list[str]:
    """Live rows of the version's other shards that no reused live segment holds (they were in a
    corrupt or stale one), copied a batch at a time into one Parquet file the workers build from."""
    local = os.path.join(work_dir, REBUILD_DIR, "rebuild-00000-of-00001.parquet")
    os.makedirs(os.path.dirname(local), exist_ok=True)
    writer, n = None, 0
    try:
        for path, _ in src.other:
            path = str(path)
            for batch in shard_store.live_batches(path, CHUNKS_DIR, src.deleted.get(shard_of(path))):
                t = pa.Table.from_batches([batch])
                t = t.filter(pc.invert(pc.is_in(t.column("chunk_id"), value_set=held)))
                if not t.num_rows:
                    continue
                if writer is None:
                    schema = t.schema
                    writer = pq.ParquetWriter(local, schema, compression="zstd")
                writer.write_table(t.cast(schema))
                n += t.num_rows
    finally:
        if writer is not None:
            writer.close()
    if not n:
        return []
    if remote:
        uri = storage.join(out_dir, REBUILD_DIR, os.path.basename(local))
        storage.upload_file(local, uri)
        return [uri]
    return [local]


def listed_shards(version_dir: str, manifest: Optional[dict] = None):
    """The shared shards a version's manifest lists (deletions included) as the shards of a run
    that processed nothing again: none fresh, none gone; None for a version keeping its shards in
    its own folder."""
    manifest = manifest if manifest is not None else shard_store.read_manifest_at(version_dir)
    if shard_store.listed_tables(manifest) is None:
        return None
    from transforms.index.incremental import VersionShards
    tables = {t: shard_store.table_shards(version_dir, t, manifest) or shard_store.TableShards()
              for t in shard_store.SHARED_TABLES}
    return VersionShards(tables, {}, [], None)


def live_segment_ids(index_dir: str, versions: list[str]) -> set[str]:
    """Segments listed by any of the named versions (what pruning must keep)."""
    from transforms.index.publish import version_dir
    keep: set[str] = set()
    for v in versions:
        try:
            m = json.loads(storage.read_text(storage.join(version_dir(index_dir, v), "manifest.json")))
        except (OSError, ValueError):
            continue
        keep.update(s["id"] for s in m.get("segments") or [])
    return keep


def prune_shards(index_dir: str, kept_versions: list[str]) -> list[str]:
    """Delete the shared shards no kept version lists (a run in progress holds the index lock; as
    for segments, a version without a readable manifest is no version a reader can open)."""
    from transforms.index.publish import version_dir
    manifests = [shard_store.read_manifest_at(version_dir(index_dir, v)) for v in kept_versions]
    return shard_store.prune(index_dir, shard_store.listed_names(manifests))


def prune_segments(index_dir: str, kept_versions: list[str]) -> list[str]:
    """Delete segments no kept version lists (a run in progress holds the index lock)."""
    keep = live_segment_ids(index_dir, kept_versions)
    root = storage.join(index_dir, SEGMENTS_DIR)
    if is_s3(index_dir):
        base = root.rstrip("/") + "/"
        present = sorted({u[len(base):].split("/", 1)[0] for u in storage.list_files(base)})
    else:
        present = sorted(os.listdir(root)) if os.path.isdir(root) else []
    from transforms.index.layout import is_segment_dir_name
    removed = []
    for sid in present:  # only what a run wrote: anything else under segments/ is not the index's
        if is_segment_dir_name(sid) and sid not in keep:
            if is_s3(index_dir):
                storage.delete_tree(segment_uri(index_dir, sid))
            else:
                import shutil
                shutil.rmtree(os.path.join(root, sid), ignore_errors=True)
            removed.append(sid)
    return removed


def rebuild_segments(cfg, index: str, log=lambda *_: None) -> dict:
    """Segments of an index's live version rebuilt from its Parquet shards alone, every row new,
    published as a NEW version (copied from it, its manifest listing the new segments) by the same
    atomic CURRENT switch as an index run: the version a reader may hold is never rewritten, and
    pruning keeps what readers lease. For a version built before segments, or after a change of
    segment_max_chunks. Holds the index lock."""
    from transforms.index import publish
    from transforms.index.publish import read_manifest
    from transforms.ingest.embed import model_spec_from_config
    from transforms.index.layout import version_parent
    src_dir = publish.resolve_index(index)
    if is_s3(src_dir):
        raise BuildArtifactsError(f"{index}: build-artifacts works on a local index; re-index into object storage instead")
    src_dir = os.path.abspath(src_dir)
    index_dir, src_name = version_parent(src_dir)
    if index_dir is None:
        raise BuildArtifactsError(f"{index}: build-artifacts works on an index (a folder with CURRENT) or a version "
                                  "inside one (INDEX/versions/<v>)")
    spec = model_spec_from_config(cfg)
    with publish.index_lock(index_dir):
        live = publish.current_version(index_dir)
        if live is not None and live != src_name:
            raise BuildArtifactsError(
                f"{index}: version {src_name} is not the live one ({live} is); build-artifacts publishes a "
                "rebuilt copy of the live version: run it on the index folder")
        manifest = read_manifest(src_dir)
        version = publish.new_version_name()
        publish.clear_staging(index_dir)
        work = publish.staging_dir(index_dir, version)
        _copy_version(src_dir, work)
        got = segment_version(index_dir, work, work, cfg, spec, None, log=log,
                              shards=listed_shards(src_dir, manifest))
        manifest.update(version=version, segments=got["segments"], bm25=got["bm25"],
                        tombstones=sum(s["deleted"] for s in got["segments"]), rebuilt_from=src_name)
        storage.write_json(os.path.join(work, "manifest.json"), manifest)
        summary_path = os.path.join(work, "summary.json")
        if os.path.exists(summary_path):
            with open(summary_path, encoding="utf-8") as f:
                summary = json.load(f)
            summary.update(version=version, rebuilt_from=src_name)
            storage.write_json(summary_path, summary)
        published = publish.publish(index_dir, version)
        # nothing after the switch fails the run: pruning is housekeeping the next run repeats
        pruned = after_publish(index_dir, cfg.index.keep_versions, log)
    return {**got, "version_dir": published, "version": version, "previous_version": src_name,
            "warnings": pruned["warnings"], "pruned": pruned["pruned"]}


class BuildArtifactsError(ActionableError, ValueError):
    """build-artifacts asked of what it does not rebuild: one line, exit 2."""


# a version's own files that a rebuilt copy does not take: its segment statistics (the copy
# writes its own) and new cache entries not yet committed (they stay with the version that made them)
_NOT_COPIED = ("segment_stats", "manifest.json", PLAN_DIR, REBUILD_DIR)


def _copy_version(src: str, dst: str) -> None:
    """A version's files into a staging dir, hard-linked where the file system allows (versions
    are immutable: nothing writes a published file in place), copied elsewhere."""
    import shutil
    from transforms.ingest.context_cache import NEW_CONTEXTS_DIR
    from transforms.ingest.embed_cache import NEW_ENTRIES_DIR
    skip = set(_NOT_COPIED) | {NEW_ENTRIES_DIR, NEW_CONTEXTS_DIR}
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in skip]
            files = [f for f in files if f not in skip]
        os.makedirs(os.path.join(dst, rel), exist_ok=True)
        for f in files:
            a, b = os.path.join(root, f), os.path.join(dst, rel, f)
            try:
                os.link(a, b)
            except OSError:
                shutil.copy2(a, b)


def after_publish(index_dir: str, keep_versions: int, log=print) -> dict:
    """Pruning after a publish (versions, then the segments no kept version lists): any failure is
    a warning, never a failed run, since the new version is already live. Returns {pruned,
    pruned_segments, warnings}."""
    from transforms.index import publish
    out: dict = {"pruned": [], "pruned_segments": 0, "pruned_shards": 0, "warnings": []}
    try:
        out["pruned"] = publish.prune(index_dir, keep_versions, log=log)
        publish.drop_pruning_leftovers(index_dir)
        kept = publish.list_versions(index_dir)  # what is left (leased ones included) keeps what it lists
        out["pruned_segments"] = len(prune_segments(index_dir, kept))
        out["pruned_shards"] = len(prune_shards(index_dir, kept))
    except Exception as e:  # the version is live: report, the next run prunes again
        out["warnings"].append(f"pruning old versions failed ({type(e).__name__}: {' '.join(str(e).split())[:200]});"
                               " the new version is live, the next run prunes again")
        log(f"ragbeam: warning: {out['warnings'][-1]}")
    return out
