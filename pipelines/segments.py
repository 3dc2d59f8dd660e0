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
from transforms.common.s3 import is_s3
from transforms.index.incremental import CARRIED_FILE
from transforms.index.segment_plan import MergePolicy, plan_segments
from transforms.index.segment_stats import write_version_stats
from transforms.index.segment_store import segment_files, segment_uri
from transforms.index.segment_build import BuildSegmentFn
from transforms.index.segments import IDS_FILE, META_FILE, SEGMENTS_DIR, Segment
from transforms.index.shards import CHUNKS_DIR, shard_files

PLAN_DIR = "_segments_plan"
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
    live_segments = []
    for s in live_list:
        seg = _driver_segment(index_dir, s["id"], PLAN_FILES, s.get("meta_sha256"))
        live_segments.append((seg.id, seg.chunk_ids(), np.zeros(0, np.int64)))

    def worker_uri(f: str) -> str:  # the workers read shards where the version is staged
        return storage.join(out_dir, CHUNKS_DIR, os.path.basename(f)) if remote else f
    if remote and carried and not live_segments:  # a full build reads the carried rows too
        storage.upload_file(carried[0], worker_uri(carried[0]))
    fresh_ids = _ids(fresh) if live_segments else _ids(files)
    plan = plan_segments([worker_uri(f) for f in fresh], fresh_ids, _ids(carried), live_segments,
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
            "segment_plan": {**plan.summary(), "built_ids": [m["id"] for m in built]},
            "artifact_s": round(t_end - t0, 3), "plan_s": round(t_plan - t0, 3),
            "build_s": round(t_build - t_plan, 3), "stats_s": round(t_end - t_build, 3)}


def live_segment_ids(index_dir: str, versions: list[str]) -> set[str]:
    """Segments listed by any of the named versions (what pruning must keep)."""
    from transforms.index.publish import version_dir
    keep: set[str] = set()
    for v in versions:
        try:
            m = json.loads(storage.read_text(storage.join(version_dir(index_dir, v), "manifest.json")))
        except (FileNotFoundError, ValueError):
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
    removed = []
    for sid in present:
        if sid not in keep:
            if is_s3(index_dir):
                storage.delete_tree(segment_uri(index_dir, sid))
            else:
                import shutil
                shutil.rmtree(os.path.join(root, sid), ignore_errors=True)
            removed.append(sid)
    return removed


def rebuild_segments(cfg, index: str) -> dict:
    """Segments of a version (an index's live one, or a version dir) rebuilt from its Parquet
    shards alone, every row new; its manifest then lists them. For a version built before
    segments, or after a change of segment_max_chunks. Holds the index lock."""
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    version_dir = publish.resolve_index(index)
    if is_s3(version_dir):
        raise ValueError(f"{index}: build-artifacts works on a local index; re-index into object storage instead")
    index_dir = os.path.dirname(os.path.dirname(os.path.abspath(version_dir)))
    spec = model_spec_from_config(cfg)
    with publish.index_lock(index_dir):
        got = segment_version(index_dir, version_dir, version_dir, cfg, spec, None)
        path = os.path.join(version_dir, "manifest.json")
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
        manifest.update(segments=got["segments"], bm25=got["bm25"],
                        tombstones=sum(s["deleted"] for s in got["segments"]))
        storage.write_json(path, manifest)  # temp + rename: readers see the old or the new list
        prune_segments(index_dir, publish.list_versions(index_dir))
    return {**got, "version_dir": version_dir}
