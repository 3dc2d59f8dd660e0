"""The segment step of the index job: workers build the new segments, the driver lists them.

After the index pipeline has written a version's shards (fresh rows from the pipeline, carried
rows copied by transforms/index/incremental.py), the driver plans from chunk ids
(transforms/index/segment_plan.py), writes one plan file per new segment into the staging dir,
and a second Beam pipeline builds each new segment on a worker (rows read from the fresh shards
and from merged old segments, never from the whole corpus) into INDEX/segments/<id>/. The driver
then writes the version's tombstones and corpus-wide BM25 statistics
(transforms/index/segment_stats.py) and returns the manifest's `segments` and `bm25`.
"""
from __future__ import annotations

import json
import os
import time
from typing import Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from transforms.common import storage
from transforms.common.errors import ActionableError
from transforms.common.s3 import is_s3
from transforms.index.incremental import CARRIED_FILE
from transforms.index.segment_plan import MergePolicy, plan_segments
from transforms.index.segment_stats import write_version_stats
from transforms.index.segment_store import SegmentMismatch, segment_files, segment_uri
from transforms.index.segment_build import BuildSegmentFn
from transforms.index.segments import (IDS_FILE, META_FILE, SEGMENTS_DIR, Segment, SegmentCorrupt, SegmentFormatError,
                                       analysis_fingerprint)
from transforms.index.shards import CHUNKS_DIR, shard_files

PLAN_DIR = "_segments_plan"
REBUILD_DIR = "_segments_rebuild"  # the carried rows of corrupt or stale live segments, built again as fresh rows
# what the driver reads of a segment: ids to plan, vocabulary and lengths for the statistics, and
# the postings of a segment with tombstones (their df); never vectors, sentences or text
PLAN_FILES = (IDS_FILE,)
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


def _ids(files: list[str]) -> pa.Array:
    cols = [pq.read_table(f, columns=["chunk_id"]).column(0).combine_chunks() for f in files]
    return pa.concat_arrays(cols) if cols else pa.array([], pa.string())


def segment_version(index_dir: str, work_dir: str, out_dir: str, cfg, spec, live_manifest: Optional[dict],
                    *, beam_args: Optional[list[str]] = None, log=print) -> dict:
    """Plan, build (in Beam) and list the version's segments. work_dir: the driver's local copy of
    the version (shards); out_dir: the same version where workers read it (local or S3)."""
    from pipelines.options import pipeline_options
    t0 = time.perf_counter()
    remote = is_s3(index_dir)
    files = shard_files(work_dir, CHUNKS_DIR)
    carried = [f for f in files if os.path.basename(f) == CARRIED_FILE]
    fresh = [f for f in files if os.path.basename(f) != CARRIED_FILE]
    live_list = (live_manifest or {}).get("segments") or []
    live_segments, corrupt, stale = [], [], []
    analysis = analysis_fingerprint()
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
        live_segments.append((seg.id, seg.chunk_ids(), np.zeros(0, np.int64)))

    def worker_uri(f: str) -> str:  # the workers read shards where the version is staged
        return storage.join(out_dir, CHUNKS_DIR, os.path.basename(f)) if remote else f
    if remote and carried and not live_segments:  # a full build reads the carried rows too
        storage.upload_file(carried[0], worker_uri(carried[0]))
    carried_ids = _ids(carried)
    rebuild_files: list[str] = []
    if corrupt:
        for sid in corrupt:  # never reused, and gone before a build of the same rows could reuse it
            if remote:
                storage.delete_tree(segment_uri(index_dir, sid).rstrip("/") + "/")
            else:
                import shutil
                shutil.rmtree(os.path.join(index_dir, SEGMENTS_DIR, sid), ignore_errors=True)
    if (corrupt or stale) and live_segments:  # rows no reusable segment holds: built again as fresh rows
        rebuild_files = _orphan_rows(carried, carried_ids, live_segments, work_dir, out_dir, remote)
    fresh_files = [worker_uri(f) for f in fresh] + rebuild_files
    fresh_ids = pa.concat_arrays([_ids(fresh), _ids([os.path.join(work_dir, REBUILD_DIR, os.path.basename(f))
                                                     for f in rebuild_files])]) if live_segments else _ids(files)
    plan = plan_segments(fresh_files, fresh_ids, carried_ids, live_segments,
                         policy_from_config(cfg), all_files=[worker_uri(f) for f in files])
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
        with beam.Pipeline(options=pipeline_options(cfg, beam_args)) as p:
            (p | "SegmentPlans" >> beam.Create(names).with_output_types(str)
               | "SpreadSegments" >> beam.Reshuffle()
               | "BuildSegment" >> beam.ParDo(BuildSegmentFn(index_dir, spec.namespace)))
        built = [json.loads(storage.read_text(n + ".done.json")) for n in names]
        storage.delete_tree(plan_dir)
    if rebuild_files:
        storage.delete_tree(storage.join(out_dir, REBUILD_DIR))
        if remote:
            import shutil
            shutil.rmtree(os.path.join(work_dir, REBUILD_DIR), ignore_errors=True)
    t_build = time.perf_counter()
    listed: list[tuple[Segment, np.ndarray]] = []
    sha_of = {s["id"]: s.get("meta_sha256") for s in live_list}
    for sid, dead in plan.keep.items():
        names = STATS_FILES + (TOMBSTONE_FILES if len(dead) else ())
        listed.append((_driver_segment(index_dir, sid, names, sha_of.get(sid)), dead))
    for meta in built:
        listed.append((_driver_segment(index_dir, meta["id"], STATS_FILES, meta.get("meta_sha256")),
                       np.zeros(0, np.int64)))
    listed.sort(key=lambda sd: (sd[0].meta.get("min_chunk_id") or "", sd[0].id))
    if len({s.id for s, _ in listed}) != len(listed):
        raise RuntimeError("a segment is listed twice: " + ", ".join(s.id for s, _ in listed))
    bm25 = write_version_stats(work_dir, listed)
    segments = [{"id": s.id, "chunks": s.n, "live": s.n - len(d), "deleted": int(len(d)),
                 "meta_sha256": storage.sha256_file(os.path.join(s.dir, META_FILE))} for s, d in listed]
    t_end = time.perf_counter()
    return {"segments": segments, "bm25": bm25,
            "segment_plan": {**plan.summary(), "built_ids": [m["id"] for m in built], "rebuilt_corrupt": len(corrupt)},
            "artifact_s": round(t_end - t0, 3), "plan_s": round(t_plan - t0, 3),
            "build_s": round(t_build - t_plan, 3), "stats_s": round(t_end - t_build, 3)}


def _orphan_rows(carried: list[str], carried_ids: pa.Array, healthy, work_dir: str, out_dir: str,
                 remote: bool) -> list[str]:
    """Carried rows that no healthy live segment holds (they were in a corrupt or stale one), copied out of
    the carried shard a batch at a time into one Parquet file the workers build from."""
    import pyarrow.compute as pc
    held = pa.concat_arrays([ids for _, ids, _ in healthy]) if healthy else pa.array([], pa.string())
    orphan = pc.filter(carried_ids, pc.invert(pc.is_in(carried_ids, value_set=held)))
    if not len(orphan) or not carried:
        return []
    local = os.path.join(work_dir, REBUILD_DIR, "rebuild-00000-of-00001.parquet")
    os.makedirs(os.path.dirname(local), exist_ok=True)
    src = pq.ParquetFile(carried[0])
    with pq.ParquetWriter(local, src.schema_arrow, compression="zstd") as w:
        for batch in src.iter_batches(batch_size=4096):
            keep = pc.is_in(batch.column(batch.schema.get_field_index("chunk_id")), value_set=orphan)
            t = pa.Table.from_batches([batch]).filter(keep)
            if t.num_rows:
                w.write_table(t)
    if remote:
        uri = storage.join(out_dir, REBUILD_DIR, os.path.basename(local))
        storage.upload_file(local, uri)
        return [uri]
    return [local]


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
        got = segment_version(index_dir, work, work, cfg, spec, None, log=log)
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
    out: dict = {"pruned": [], "pruned_segments": 0, "warnings": []}
    try:
        out["pruned"] = publish.prune(index_dir, keep_versions, log=log)
        publish.drop_pruning_leftovers(index_dir)
        out["pruned_segments"] = len(prune_segments(index_dir, publish.list_versions(index_dir)))
    except Exception as e:  # the version is live: report, the next run prunes again
        out["warnings"].append(f"pruning old versions failed ({type(e).__name__}: {' '.join(str(e).split())[:200]});"
                               " the new version is live, the next run prunes again")
        log(f"ragbeam: warning: {out['warnings'][-1]}")
    return out
