"""Incremental re-indexing by content hash: plan, then carry unchanged rows over.

The live version's `sources` table says, per path, its size, mtime and content
hash. A new run reads only paths that are new or whose size/mtime changed (or
everything with `source.full_hash`). A content is *carried* - its document,
chunk and dead-letter rows copied into the new version without parsing or
embedding - when the live version already holds it, it is processed by the same
versions (parser, chunker settings, contextualizer, model, ACL rules), and its
representative path (the smallest key among its copies) is the same; then only
the list of paths it is found under changes. Anything else is processed anew
(vectors still come from the embedding cache when the text did not change).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Iterable, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.common import storage
from transforms.common.s3 import is_s3
from transforms.index import publish
from transforms.ingest.read import ListedObject
from transforms.records import DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, SOURCE_SCHEMA, chunk_schema, embedding_dim
from transforms.index.shards import (CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR, NEAR_DUPLICATES_DIR, SIGNATURES_DIR,
                                     read_table, shard_files)

SOURCES_DIR = "sources"
SOURCES_READ_DIR = "sources_read"  # written by the pipeline: every object it read, with its hash
CARRIED_FILE = "carried-00000-of-00001.parquet"


def processing_key(versions: dict) -> str:
    """One digest of everything that shapes a content's rows; equal keys mean rows can be reused."""
    return hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class LiveIndex:
    version_dir: str
    manifest: dict
    sources: dict[str, dict]  # uri -> SOURCE_SCHEMA row (live paths only)
    tombstones: list[dict]
    known_hashes: set[str]  # contents with rows (documents, near-duplicates or dead letters) in the live version
    # near_duplicates rows (member, representative, their file hashes): members are re-checked
    # when their representative is re-processed or gone
    near_rows: list[dict] = field(default_factory=list)


def mirror_version(version_uri: str, local_root: str) -> str:
    """A local copy of a version on object storage (its tables and manifest): the driver plans
    and carries rows over from it as from a local version."""
    name = version_uri.rstrip("/").rsplit("/", 1)[-1]
    local = os.path.join(local_root, name)
    only = ("manifest.json", SOURCES_DIR + "/", DOCUMENTS_DIR + "/", DEAD_LETTERS_DIR + "/", CHUNKS_DIR + "/",
            NEAR_DUPLICATES_DIR + "/", SIGNATURES_DIR + "/")
    storage.download_tree(version_uri, local, only=only)
    return local


def load_live(index_dir: str, scratch: Optional[str] = None) -> Optional[LiveIndex]:
    """The live version; on object storage it is mirrored under `scratch` first (a temp dir if unset)."""
    name = publish.current_version(index_dir)
    if name is None:
        return None
    vdir = publish.version_dir(index_dir, name)
    if is_s3(index_dir):
        import tempfile
        vdir = mirror_version(vdir, os.path.join(scratch or tempfile.mkdtemp(prefix="ragbeam-"), "live"))
    manifest = publish.read_manifest(vdir)  # a cut one: one line naming it, not a traceback
    if not shard_files(vdir, SOURCES_DIR):
        return None  # a version without a sources table cannot be compared against
    rows = read_table(vdir, SOURCES_DIR).to_pylist()
    known = set(read_table(vdir, DOCUMENTS_DIR, ["source_hash"]).column("source_hash").to_pylist())
    known |= {h for h in read_table(vdir, DEAD_LETTERS_DIR, ["content_hash"]).column("content_hash").to_pylist() if h}
    near = (read_table(vdir, NEAR_DUPLICATES_DIR, ["member", "representative", "member_source_hash",
                                                   "representative_source_hash"]).to_pylist()
            if shard_files(vdir, NEAR_DUPLICATES_DIR) else [])
    known |= {r["member_source_hash"] for r in near if r["member_source_hash"]}
    return LiveIndex(vdir, manifest, {r["uri"]: r for r in rows if r["status"] == "live"},
                     [r for r in rows if r["status"] != "live"], known, near)


@dataclass
class Plan:
    listed: list[ListedObject]
    to_read: list[ListedObject]
    skipped: dict[str, tuple[ListedObject, str]]  # uri -> (listing, hash known from the live version)
    removed: list[str]
    known_rep: dict[str, str] = field(default_factory=dict)  # hash -> live representative key
    live: Optional[LiveIndex] = None
    # live contents that are not certain to be carried over (re-read, gone, or near-duplicate
    # members to re-check): their stored signatures are no match for new documents
    near_exclude: set[str] = field(default_factory=set)

    def extra_copies(self) -> dict[str, list[tuple[str, str, int, float]]]:
        """Unread copies by hash, (uri, key, size, mtime): dedupe needs every copy to pick a representative."""
        out: dict[str, list] = {}
        for uri, (lo, h) in self.skipped.items():
            out.setdefault(h, []).append((lo.uri, lo.key, lo.size, lo.mtime))
        return out


def representative(copies: Iterable[tuple]) -> tuple:
    """The copy with the smallest (key, uri): copies are (uri, key, ...) tuples."""
    return min(copies, key=lambda c: (c[1], c[0]))


def is_carried(content_hash: str, copies: list[tuple], known_rep: dict[str, str]) -> bool:
    return content_hash in known_rep and representative(copies)[1] == known_rep[content_hash]


def make_plan(listed: list[ListedObject], live: Optional[LiveIndex], current_key: str,
              full_hash: bool = False) -> Plan:
    if live is None:
        return Plan(listed, list(listed), {}, [], {}, None)
    same_versions = live.manifest.get("processing_key") == current_key
    skipped: dict[str, tuple[ListedObject, str]] = {}
    to_read: list[ListedObject] = []
    for lo in listed:
        row = live.sources.get(lo.uri)
        if (same_versions and not full_hash and row is not None and row["size"] == lo.size
                and row["mtime"] == lo.mtime and row["key"] == lo.key):
            skipped[lo.uri] = (lo, row["content_hash"])
        else:
            to_read.append(lo)
    known_rep: dict[str, str] = {}
    if same_versions:
        by_hash: dict[str, list[tuple]] = {}
        for r in live.sources.values():
            by_hash.setdefault(r["content_hash"], []).append((r["uri"], r["key"]))
        known_rep = {h: representative(c)[1] for h, c in by_hash.items() if h in live.known_hashes}
    # A near-duplicate member whose representative is re-read or gone is re-checked: its content
    # is processed again (signed, matched against the live index, clustered with the other
    # members of its cluster: one of them takes over as representative and is indexed).
    keys_by_hash = _skipped_keys_by_hash(skipped)
    stable = lambda h: h in known_rep and known_rep[h] in keys_by_hash.get(h, ())  # noqa: E731
    recheck = {r["member_source_hash"] for r in live.near_rows if not stable(r["representative_source_hash"])}
    for h in recheck:
        known_rep.pop(h, None)
    # A content whose live representative is gone or changed needs its bytes: read one copy.
    listed_uris = {lo.uri for lo in listed}
    groups: dict[str, list[ListedObject]] = {}
    for uri, (lo, h) in skipped.items():
        groups.setdefault(h, []).append(lo)
    for h, los in groups.items():
        rep_key = known_rep.get(h)
        if rep_key is None or rep_key not in {lo.key for lo in los}:
            first = min(los, key=lambda lo: (lo.key, lo.uri))
            del skipped[first.uri]
            to_read.append(first)
    removed = sorted(set(live.sources) - listed_uris)
    keys_by_hash = _skipped_keys_by_hash(skipped)
    touched = {live.sources[lo.uri]["content_hash"] for lo in to_read if lo.uri in live.sources}
    touched |= {live.sources[u]["content_hash"] for u in removed} | recheck
    exclude = {h for h in touched if not stable(h)}
    return Plan(listed, to_read, skipped, removed, known_rep, live, exclude)


def _skipped_keys_by_hash(skipped: dict) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for lo, h in skipped.values():
        out.setdefault(h, set()).add(lo.key)
    return out


def _copies_by_hash(plan: Plan, read_rows: list[dict]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for uri, (lo, h) in plan.skipped.items():
        out.setdefault(h, []).append((lo.uri, lo.key, lo.size, lo.mtime))
    for r in read_rows:
        out.setdefault(r["content_hash"], []).append((r["uri"], r["key"], r["size"], r["mtime"]))
    return out


def write_sources_and_carry(plan: Plan, out_dir: str, today: Optional[str] = None) -> dict:
    """After the pipeline: the new sources table, and carried rows copied into out_dir.

    Returns counts: added, changed, removed, unchanged, carried_documents, carried_chunks.
    """
    today = today or datetime.date.today().isoformat()
    read_files = shard_files(out_dir, SOURCES_READ_DIR)
    read_rows = read_table(out_dir, SOURCES_READ_DIR).to_pylist() if read_files else []
    copies = _copies_by_hash(plan, read_rows)
    live = plan.live
    live_sources = live.sources if live else {}

    # sources: every current path, plus tombstones of paths that disappeared
    rows = [{"uri": c[0], "key": c[1], "size": c[2], "mtime": c[3], "content_hash": h, "status": "live",
             "tombstoned_at": None} for h, cs in copies.items() for c in cs]
    current = {r["uri"] for r in rows}
    tombstones = [t for t in (live.tombstones if live else []) if t["uri"] not in current]
    tombstones += [{**live_sources[u], "status": "tombstoned", "tombstoned_at": today} for u in plan.removed]
    os.makedirs(os.path.join(out_dir, SOURCES_DIR), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(sorted(rows + tombstones, key=lambda r: r["uri"]), SOURCE_SCHEMA),
                   os.path.join(out_dir, SOURCES_DIR, "sources.parquet"), compression="zstd")
    for f in read_files:
        os.remove(f)

    counts = {"added": sum(1 for r in rows if r["uri"] not in live_sources),
              "changed": sum(1 for r in read_rows if r["uri"] in live_sources
                             and live_sources[r["uri"]]["content_hash"] != r["content_hash"]),
              "removed": len(plan.removed),
              "carried_documents": 0, "carried_chunks": 0, "carried_near_duplicates": 0}
    counts["unchanged"] = len(rows) - counts["added"] - counts["changed"]
    if live is None:
        return counts

    carried = {h for h, cs in copies.items() if is_carried(h, cs, plan.known_rep)}
    if not carried:
        return counts
    uris_of = {h: sorted(c[0] for c in copies[h]) for h in carried}
    rep_of = {h: representative(copies[h]) for h in carried}

    docs = read_table(live.version_dir, DOCUMENTS_DIR)
    docs = docs.filter(pc.is_in(docs.column("source_hash"), pa.array(sorted(carried))))
    members_of = _carry_near_duplicates(live.version_dir, out_dir, carried, uris_of,
                                        set(docs.column("doc_id").to_pylist()), counts)
    # A record repeated verbatim in a re-processed file is already in the new rows: keep one.
    fresh = shard_files(out_dir, DOCUMENTS_DIR)
    if fresh:
        fresh_hashes = pa.concat_arrays([pq.read_table(f, columns=["content_hash"]).column(0).combine_chunks()
                                         for f in fresh])
        docs = docs.filter(pc.invert(pc.is_in(docs.column("content_hash"), fresh_hashes)))
    # Per carried content (not per row): its paths and the representative's size/mtime as listed
    # now (its bytes are the same); the rows take theirs by their source_hash.
    by_hash = sorted(carried)
    at = pc.index_in(docs.column("source_hash"), value_set=pa.array(by_hash, pa.string()))
    doc_uris = pa.array([sorted(set(uris_of[h])) for h in by_hash], pa.list_(pa.string())).take(at)
    mtimes = pa.array([float(rep_of[h][3]) for h in by_hash], pa.float64()).take(at)
    # near-duplicate representatives: their members' paths join theirs
    hit = pc.is_in(docs.column("doc_id"), pa.array(sorted(members_of), pa.string()))
    if pc.any(hit).as_py():
        reps = docs.filter(hit).select(["doc_id", "source_hash"])
        rep_ids = reps.column("doc_id").to_pylist()
        merged = pa.array([sorted(set(uris_of[h]) | members_of[d])
                           for d, h in zip(rep_ids, reps.column("source_hash").to_pylist())], pa.list_(pa.string()))
        doc_uris = pc.if_else(hit, merged.take(pc.index_in(docs.column("doc_id"), value_set=pa.array(rep_ids))),
                              doc_uris)
    docs = docs.set_column(docs.schema.get_field_index("source_uris"), "source_uris", doc_uris)
    docs = docs.set_column(docs.schema.get_field_index("mtime"), "mtime", mtimes)
    _write(docs.cast(DOCUMENT_SCHEMA), out_dir, DOCUMENTS_DIR)
    counts["carried_documents"] = docs.num_rows

    counts["carried_chunks"] = _carry_chunks(live.version_dir, out_dir,
                                             docs.select(["doc_id", "content_hash", "source_uris"]))

    dead = read_table(live.version_dir, DEAD_LETTERS_DIR)
    dead = dead.filter(pc.is_in(dead.column("content_hash"), pa.array(sorted(carried))))
    _write(dead.cast(DEAD_LETTER_SCHEMA), out_dir, DEAD_LETTERS_DIR)
    return counts


# The carried chunks stream: live rows are read CARRY_READ_ROWS at a time, matched to the
# carried documents, and written CARRY_ROW_GROUP_ROWS to a row group (~10k rows of 384-d
# vectors plus text and sentence vectors is a few tens of MB), so memory holds a row group,
# never the live table.
CARRY_READ_ROWS = 2048
CARRY_ROW_GROUP_ROWS = 10_000


def _pair_key(table) -> pa.ChunkedArray:
    """content_hash + "\\x1f" + doc_id: one string per (doc_id, content_hash) pair. A content
    hash is hex (never "\\x1f"), so the first separator splits it: distinct pairs, distinct keys."""
    return pc.binary_join_element_wise(table.column("content_hash"), table.column("doc_id"), "\x1f")


def _carry_chunks(live_dir: str, out_dir: str, keys: pa.Table) -> int:
    """Copy the live chunks of the carried documents into out_dir/chunks, in their live order,
    with their new source_uris; returns how many. keys: one row per carried document (doc_id,
    content_hash, source_uris). Each batch of live rows is matched by its (doc_id, content_hash)
    in Arrow, cast to chunk_schema(dim) (columns added since the live version was written are
    typed nulls) and written: no vector or per-row list is ever a Python object."""
    files = shard_files(live_dir, CHUNKS_DIR)
    if not files or not keys.num_rows:
        return 0
    schema = chunk_schema(embedding_dim(pq.read_schema(files[0])))
    target = os.path.join(out_dir, CHUNKS_DIR, CARRIED_FILE)
    partial = target + ".partial"  # not *.parquet: no reader takes it for a shard
    writer, rows = None, 0
    try:
        for group in _row_groups(_carried_batches(files, schema, keys), schema):
            if writer is None:
                writer = pq.ParquetWriter(partial, schema, compression="zstd")
            writer.write_table(group)
            rows += group.num_rows
        if writer is not None:
            writer.close()
            writer = None
            os.replace(partial, target)
    finally:
        if writer is not None:
            writer.close()
        if os.path.exists(partial):
            os.remove(partial)
    return rows


def _carried_batches(files: list[str], schema: pa.Schema, keys: pa.Table) -> Iterable[pa.RecordBatch]:
    # a document listed twice has the same paths in both rows: index_in takes the first
    wanted = _pair_key(keys).combine_chunks()
    uris = keys.column("source_uris").combine_chunks()
    for f in files:
        for batch in pq.ParquetFile(f).iter_batches(batch_size=CARRY_READ_ROWS):
            at = pc.index_in(_pair_key(batch), value_set=wanted)
            keep = pc.is_valid(at)
            batch = batch.filter(keep)
            if not batch.num_rows:
                continue
            names = set(batch.schema.names)
            columns = [uris.take(at.filter(keep)) if field.name == "source_uris"
                       else batch.column(field.name) if field.name in names
                       else pa.nulls(batch.num_rows, field.type) for field in schema]
            yield pa.RecordBatch.from_arrays(columns, names=schema.names).cast(schema)


def _row_groups(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> Iterable[pa.Table]:
    """Batches gathered into tables of at least CARRY_ROW_GROUP_ROWS rows (the last: the rest)."""
    pending, n = [], 0
    for batch in batches:
        pending.append(batch)
        n += batch.num_rows
        if n >= CARRY_ROW_GROUP_ROWS:
            yield pa.Table.from_batches(pending, schema)
            pending, n = [], 0
    if pending:
        yield pa.Table.from_batches(pending, schema)


def _carry_near_duplicates(live_dir: str, out_dir: str, carried: set[str], uris_of: dict,
                           carried_docs: set[str], counts: dict) -> dict[str, set[str]]:
    """Carried near-duplicate members keep their near_duplicates and signatures rows; returns the
    member paths per representative doc_id (this run's new members and the carried ones), which
    join the carried representatives' source_uris."""
    from transforms.ingest.neardup import NEAR_DUPLICATES_SCHEMA, SIGNATURE_SCHEMA
    fresh_docs: set[str] = set()
    if shard_files(out_dir, DOCUMENTS_DIR):
        fresh_docs = set(read_table(out_dir, DOCUMENTS_DIR, ["doc_id"]).column(0).to_pylist())
    members: dict[str, set[str]] = {}
    if shard_files(out_dir, NEAR_DUPLICATES_DIR):
        for r in read_table(out_dir, NEAR_DUPLICATES_DIR, ["representative", "member_source_uris"]).to_pylist():
            members.setdefault(r["representative"], set()).update(r["member_source_uris"] or [])
    if shard_files(live_dir, NEAR_DUPLICATES_DIR):
        near = read_table(live_dir, NEAR_DUPLICATES_DIR)
        near = near.filter(pc.is_in(near.column("member_source_hash"), pa.array(sorted(carried), pa.string())))
        rows = [r for r in near.to_pylist()
                if r["representative"] in carried_docs or r["representative"] in fresh_docs]
        for r in rows:
            r["member_source_uris"] = uris_of[r["member_source_hash"]]
            members.setdefault(r["representative"], set()).update(r["member_source_uris"])
        os.makedirs(os.path.join(out_dir, NEAR_DUPLICATES_DIR), exist_ok=True)
        _write(pa.Table.from_pylist(rows, NEAR_DUPLICATES_SCHEMA), out_dir, NEAR_DUPLICATES_DIR)
        counts["carried_near_duplicates"] = len(rows)
    if shard_files(live_dir, SIGNATURES_DIR):
        sigs = read_table(live_dir, SIGNATURES_DIR)
        sigs = sigs.filter(pc.is_in(sigs.column("source_hash"), pa.array(sorted(carried), pa.string())))
        os.makedirs(os.path.join(out_dir, SIGNATURES_DIR), exist_ok=True)
        _write(sigs.cast(SIGNATURE_SCHEMA), out_dir, SIGNATURES_DIR)
    return members


def _write(table: pa.Table, out_dir: str, name: str) -> None:
    if table.num_rows:
        pq.write_table(table, os.path.join(out_dir, name, CARRIED_FILE), compression="zstd")
