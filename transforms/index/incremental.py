"""Incremental re-indexing by content hash: plan, then carry unchanged rows over.

The live version's `sources` table says, per path, its size, mtime and content
hash. A new run reads only paths that are new or whose size/mtime changed (or
everything with `source.full_hash`). A content is *carried* - its document,
chunk and dead-letter rows kept in the new version without parsing or
embedding - when the live version already holds it, it is processed by the same
versions (parser, chunker settings, contextualizer, model, ACL rules), and its
representative path (the smallest key among its copies) is the same; then only
the list of paths it is found under changes. Anything else is processed anew
(vectors still come from the embedding cache when the text did not change).
Carried rows are not copied: the new version lists the live version's shards again
(transforms/index/shard_store.py) and records what left them; only rows whose paths
changed, and those of compacted shards, are written again.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from transforms.common import storage
from transforms.common.s3 import is_s3
from transforms.index import publish, shard_store
from transforms.index.shard_store import KEY_SEP
from transforms.ingest.read import ListedObject
from transforms.records import DEAD_LETTER_SCHEMA, DOCUMENT_SCHEMA, SOURCE_SCHEMA, chunk_schema, embedding_dim
from transforms.index.shards import (CHUNKS_DIR, DEAD_LETTERS_DIR, DOCUMENTS_DIR, NEAR_DUPLICATES_DIR, SIGNATURES_DIR,
                                     read_table, shard_files)

SOURCES_DIR = "sources"
SOURCES_READ_DIR = "sources_read"  # written by the pipeline: every object it read, with its hash
CARRIED_FILE = "carried-00000-of-00001.parquet"
KEPT_DOCUMENTS_DIR = "kept_documents"  # written by the pipeline: documents of re-read files kept as they are
KEPT_DOCUMENTS_SCHEMA = pa.schema([("key", pa.string())])


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


def mirror_version(version_uri: str, local_root: str, chunk_shards: bool = True) -> str:
    """A local copy of a version on object storage, laid out as an index (returns
    local_root/versions/<v>; the shared shards it lists go to local_root/shards/): its own tables
    and manifest, the documents and dead-letter shards it lists, the chunk shards' summaries and,
    with chunk_shards, the chunk shards too (the index driver plans without them)."""
    name = version_uri.rstrip("/").rsplit("/", 1)[-1]
    local = os.path.join(local_root, publish.VERSIONS, name)
    only = ("manifest.json", SOURCES_DIR + "/", DOCUMENTS_DIR + "/", DEAD_LETTERS_DIR + "/", CHUNKS_DIR + "/",
            NEAR_DUPLICATES_DIR + "/", SIGNATURES_DIR + "/", shard_store.DELETIONS_DIR + "/")
    storage.download_tree(version_uri, local, only=only)
    manifest = shard_store.read_manifest_at(local)
    source = shard_store.ShardSource(shard_store.index_of(version_uri), cache=local_root)
    for table in shard_store.SHARED_TABLES:
        listing = shard_store.table_shards(local, table, manifest)
        for e in listing.entries if listing else []:
            source.summary(table, e.name)
            if table not in (CHUNKS_DIR, SIGNATURES_DIR) or chunk_shards:  # the carry needs their summaries
                source.path(table, e.name)
    return local


def load_live(index_dir: str, scratch: Optional[str] = None) -> Optional[LiveIndex]:
    """The live version; on object storage it is mirrored under `scratch` first (a temp dir if unset)."""
    name = publish.current_version(index_dir)
    if name is None:
        return None
    vdir = publish.version_dir(index_dir, name)
    if is_s3(index_dir):
        import tempfile
        vdir = mirror_version(vdir, scratch or tempfile.mkdtemp(prefix="ragbeam-"), chunk_shards=False)
    manifest = publish.read_manifest(vdir)  # a cut one: one line naming it, not a traceback
    if not shard_files(vdir, SOURCES_DIR):
        return None  # a version without a sources table cannot be compared against
    rows = read_table(vdir, SOURCES_DIR).to_pylist()
    known = set(read_table(vdir, DOCUMENTS_DIR, ["source_hash"]).column("source_hash").to_pylist())
    known |= {h for h in read_table(vdir, DEAD_LETTERS_DIR, ["content_hash"]).column("content_hash").to_pylist() if h}
    near = (read_table(vdir, NEAR_DUPLICATES_DIR, ["member", "representative", "member_source_hash",
                                                   "member_content_hash", "representative_source_hash"]).to_pylist()
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
    # Files re-read only to re-check near-duplicate members in them (their bytes and representative
    # path unchanged): hash -> the paths it is listed under. Their other documents are kept as the
    # live version holds them (keep_documents: document keys, shard_store.KEY_COLUMNS["documents"]),
    # never chunked or embedded again; only the members (near_exclude_docs) are checked again.
    partial: dict[str, frozenset] = field(default_factory=dict)
    keep_documents: frozenset = frozenset()
    near_exclude_docs: frozenset = frozenset()

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
    recheck_rows = [r for r in live.near_rows if not stable(r["representative_source_hash"])]
    recheck = {r["member_source_hash"] for r in recheck_rows}
    # a member's file that is itself unchanged is re-read for its members alone: its other
    # documents keep their rows (document level), so only the members are processed again
    partial_hashes = {h for h in recheck if stable(h)}
    partial = {h: frozenset(lo.uri for lo, hh in skipped.values() if hh == h) for h in partial_hashes}
    recheck_docs = frozenset(r["member"] for r in recheck_rows)
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
    touched |= {live.sources[u]["content_hash"] for u in removed} | (recheck - partial_hashes)
    exclude = {h for h in touched if not stable(h)}
    keep = keep_document_keys(live, partial, recheck_docs) if partial else frozenset()
    return Plan(listed, to_read, skipped, removed, known_rep, live, exclude, partial, keep,
                recheck_docs if partial else frozenset())


def keep_document_keys(live: LiveIndex, partial: dict, recheck_docs: frozenset) -> frozenset:
    """The documents of files re-read only for the near-duplicate members in them that keep their
    live rows: the documents table's rows of those files and their members whose representative
    stays (keys as shard_store.row_keys("documents") makes them: source hash, content hash, doc id)."""
    hashes = pa.array(sorted(partial), pa.string())
    docs = read_table(live.version_dir, DOCUMENTS_DIR, ["source_hash", "content_hash", "doc_id"])
    docs = docs.filter(pc.is_in(docs.column("source_hash"), value_set=hashes))
    keys = set(shard_store.row_keys(DOCUMENTS_DIR, docs).to_pylist())
    keys |= {KEY_SEP.join((r["member_source_hash"] or "", r.get("member_content_hash") or "", r["member"]))
             for r in live.near_rows if r["member_source_hash"] in partial and r["member"] not in recheck_docs}
    return frozenset(keys)


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


def write_sources_and_carry(plan: Plan, out_dir: str, today: Optional[str] = None,
                            index_dir: Optional[str] = None) -> tuple[dict, Optional["Carry"]]:
    """After the pipeline: the new sources table, and what the new version keeps of the live one.

    The live version's shards are not copied: the carry lists them again, records the rows that
    leave (deletions) and writes only rows that changed (a carried document's new paths) or that a
    mostly-deleted or small shard still holds (compaction) into out_dir/<table>/CARRIED_FILE.
    Returns (counts: added, changed, removed, unchanged, carried_documents, carried_chunks, ...;
    the Carry, None without a live version).
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
    kept_files = shard_files(out_dir, KEPT_DOCUMENTS_DIR)
    kept_keys = (pa.concat_arrays([pq.read_table(f, columns=["key"]).column(0).combine_chunks() for f in kept_files])
                 if kept_files else pa.array([], pa.string()))
    for f in read_files + kept_files:
        os.remove(f)
    if os.path.isdir(os.path.join(out_dir, KEPT_DOCUMENTS_DIR)):
        os.rmdir(os.path.join(out_dir, KEPT_DOCUMENTS_DIR))

    counts = {"added": sum(1 for r in rows if r["uri"] not in live_sources),
              "changed": sum(1 for r in read_rows if r["uri"] in live_sources
                             and live_sources[r["uri"]]["content_hash"] != r["content_hash"]),
              "removed": len(plan.removed),
              "carried_documents": 0, "carried_chunks": 0, "carried_near_duplicates": 0}
    counts["unchanged"] = len(rows) - counts["added"] - counts["changed"]
    if live is None:
        return counts, None

    index_dir = index_dir or shard_store.index_of(live.version_dir)
    source = shard_store.ShardSource(index_dir, cache=shard_store.index_of(live.version_dir)
                                     if is_s3(index_dir) else None)
    inherited = _inherited_tables(live, index_dir, out_dir)
    carried = {h for h, cs in copies.items() if is_carried(h, cs, plan.known_rep)}
    # documents the pipeline kept as the live version holds them (files re-read only for the
    # near-duplicate members in them): carried one by one, with their file's paths
    kept_hashes = {k.split(KEY_SEP, 1)[0] for k in pc.unique(kept_keys).to_pylist()} & set(copies)
    if len(kept_keys):  # (a file no longer listed under that hash keeps nothing)
        kept_keys = kept_keys.filter(pc.is_in(pc.list_element(pc.split_pattern(kept_keys, KEY_SEP, max_splits=1), 0),
                                              value_set=pa.array(sorted(kept_hashes), pa.string())))
    with_paths = carried | kept_hashes
    uris_of = {h: sorted(c[0] for c in copies[h]) for h in with_paths}
    rep_of = {h: representative(copies[h]) for h in with_paths}
    carried_arr = pa.array(sorted(carried), pa.string())

    # documents: read whole (one row per document), each row tagged with its shard
    docs_ts = inherited[DOCUMENTS_DIR]
    live_docs = _tagged_rows(docs_ts, DOCUMENTS_DIR, source, DOCUMENT_SCHEMA)
    is_kept = pc.is_in(live_docs.column("source_hash"), value_set=carried_arr)
    if len(kept_keys):
        is_kept = pc.or_(is_kept, pc.is_in(shard_store.row_keys(DOCUMENTS_DIR, live_docs), value_set=kept_keys))
    docs = live_docs.filter(is_kept)
    members_of = _carry_near_duplicates(live.version_dir, out_dir, carried, uris_of,
                                        set(docs.column("doc_id").to_pylist()), counts, kept_keys)
    # A record repeated verbatim in a re-processed file is already in the new rows: keep one.
    fresh = shard_files(out_dir, DOCUMENTS_DIR)
    if fresh:
        fresh_hashes = pa.concat_arrays([pq.read_table(f, columns=["content_hash"]).column(0).combine_chunks()
                                         for f in fresh])
        docs = docs.filter(pc.invert(pc.is_in(docs.column("content_hash"), fresh_hashes)))
    new_docs = _with_new_paths(docs, with_paths, uris_of, rep_of, members_of)
    old_paths = pc.binary_join(docs.column("source_uris"), KEY_SEP)
    new_paths = pc.binary_join(new_docs.column("source_uris"), KEY_SEP)
    paths_moved = pc.fill_null(pc.not_equal(old_paths, new_paths), True)
    doc_changed = pc.or_(paths_moved, pc.fill_null(pc.not_equal(docs.column("mtime"), new_docs.column("mtime")), True))
    doc_changed = _flat(doc_changed)
    kept_doc_keys = shard_store.row_keys(DOCUMENTS_DIR, docs.filter(pc.invert(doc_changed)))
    docs_out, compact_docs, _, _ = _settle(docs_ts, _tag_counts(live_docs, DOCUMENTS_DIR, len(docs_ts.entries)),
                                           kept_doc_keys)
    doc_rows = [new_docs.filter(doc_changed).drop_columns([SHARD_TAG])]
    doc_rows += [live_docs.filter(_in_shards(live_docs, compact_docs)).filter(
        pc.is_in(shard_store.row_keys(DOCUMENTS_DIR, live_docs.filter(_in_shards(live_docs, compact_docs))),
                 value_set=kept_doc_keys)).drop_columns([SHARD_TAG])]
    _write(pa.concat_tables([t.cast(DOCUMENT_SCHEMA) for t in doc_rows]), out_dir, DOCUMENTS_DIR)
    counts["carried_documents"] = new_docs.num_rows

    # chunks: decided per document from the shards' summaries; only moved paths and compacted
    # shards are read
    pair_keys = shard_store.row_keys(CHUNKS_DIR, new_docs)
    moved = _flat(pc.fill_null(paths_moved, True))
    kept_pairs = pair_keys.filter(pc.invert(moved))
    moved_pairs, moved_uris = pair_keys.filter(moved), new_docs.column("source_uris").combine_chunks().filter(moved)
    chunks_ts = inherited[CHUNKS_DIR]
    summaries = [_live_summary(source.summary(CHUNKS_DIR, e.name), chunks_ts.deleted.get(e.name))
                 for e in chunks_ts.entries]
    chunks_out, compact_chunks, gone, kept_rows = _settle(chunks_ts, summaries, kept_pairs)
    compacted = {e.name: e.live for _, e in compact_chunks}
    touched = set(compacted) | {e.name for e, lk in zip(chunks_ts.entries, summaries) if len(moved_pairs)
                                and lk.num_rows and pc.any(pc.is_in(lk.column("key"), value_set=moved_pairs)).as_py()}
    written = _rewrite_chunks([(e, chunks_ts.deleted.get(e.name), e.name in compacted)
                               for e in chunks_ts.entries if e.name in touched],
                              source, out_dir, kept_pairs, moved_pairs, moved_uris)
    counts["carried_chunks"] = kept_rows + written - sum(compacted.values())  # compacted rows count once
    gone_keys = pc.unique(gone.filter(pc.invert(pc.is_in(gone, value_set=moved_pairs)))) if len(gone) else gone

    # signatures (near-duplicates), a row per signed document: decided from the shards' summaries,
    # kept with their documents (carried files, kept documents); only compacted shards are read
    sig_ts = inherited[SIGNATURES_DIR]
    sig_sums = [_live_summary(source.summary(SIGNATURES_DIR, e.name), sig_ts.deleted.get(e.name))
                for e in sig_ts.entries]
    sig_keep = _signature_keys(sig_sums, carried_arr, kept_keys)
    sigs_out, compact_sigs, _, _ = _settle(sig_ts, sig_sums, sig_keep)
    if compact_sigs:
        from transforms.ingest.neardup import SIGNATURE_SCHEMA
        rows = [shard_store.read_shard(source.path(SIGNATURES_DIR, sig_ts.entries[i].name), SIGNATURES_DIR,
                                       sig_ts.deleted.get(sig_ts.entries[i].name)) for i, _ in compact_sigs]
        rows = pa.concat_tables([r.select(SIGNATURE_SCHEMA.names).cast(SIGNATURE_SCHEMA) for r in rows])
        _write(rows.filter(pc.is_in(shard_store.row_keys(SIGNATURES_DIR, rows), value_set=sig_keep)),
               out_dir, SIGNATURES_DIR)

    # dead letters: read whole, kept by content hash
    dl_ts = inherited[DEAD_LETTERS_DIR]
    live_dead = _tagged_rows(dl_ts, DEAD_LETTERS_DIR, source, DEAD_LETTER_SCHEMA)
    dl_keep = pc.unique(carried_arr)
    dl_out, compact_dl, _, _ = _settle(dl_ts, _tag_counts(live_dead, DEAD_LETTERS_DIR, len(dl_ts.entries)), dl_keep)
    compacted = live_dead.filter(_in_shards(live_dead, compact_dl))
    compacted = compacted.filter(pc.is_in(shard_store.row_keys(DEAD_LETTERS_DIR, compacted), value_set=dl_keep))
    _write(compacted.drop_columns([SHARD_TAG]).cast(DEAD_LETTER_SCHEMA), out_dir, DEAD_LETTERS_DIR)
    return counts, Carry({DOCUMENTS_DIR: docs_out, CHUNKS_DIR: chunks_out, DEAD_LETTERS_DIR: dl_out,
                          SIGNATURES_DIR: sigs_out}, gone_keys)


def _signature_keys(summaries: list[pa.Table], carried: pa.Array, kept_keys: pa.Array) -> pa.Array:
    """The live signature keys the new version keeps: those of carried files (the key's first
    part is the file's hash) and of documents kept one by one."""
    parts = []
    for lk in summaries:
        if not lk.num_rows:
            continue
        keys = _flat(lk.column("key"))
        file_hash = pc.list_element(pc.split_pattern(keys, KEY_SEP, max_splits=1), 0)
        keep = pc.is_in(file_hash, value_set=carried)
        if len(kept_keys):
            keep = pc.or_(keep, pc.is_in(keys, value_set=kept_keys))
        parts.append(keys.filter(keep))
    return pa.concat_arrays(parts) if parts else pa.array([], pa.string())


@dataclass
class Carry:
    """What a new version keeps of the live one: the live shards it lists again (each with the keys
    deleted from it), and the chunk keys that are gone (removed or processed again, not merely
    moved to new paths): the segment step tombstones their rows."""
    tables: dict[str, shard_store.TableShards]
    gone_chunk_keys: pa.Array


@dataclass
class VersionShards:
    """A new version's shards: per table the list (the live version's still listed, then this
    run's), the names this run wrote, and what the segment step needs: the chunk shards holding
    the rows processed this run, and the chunk keys that are gone (None: no live version)."""
    tables: dict[str, shard_store.TableShards]
    written: dict[str, list[str]]
    fresh_chunks: list[str]
    gone_chunk_keys: Optional[pa.Array]

    def summary(self) -> dict:
        return {t: {"listed": len(ts.entries), "written": len(self.written.get(t, [])), "live_rows": ts.live_rows,
                    "deleted_rows": sum(e.deleted for e in ts.entries)} for t, ts in self.tables.items()}


def list_version_shards(index_dir: str, work_dir: str, carry: Optional[Carry], staged_dir: Optional[str] = None,
                        cache: Optional[str] = None) -> VersionShards:
    """Put this run's shards (work_dir/<table>/*.parquet: the pipeline's and the carry's) into
    the shared store and list the version's shards. On object storage the pipeline's shards are
    copied server-side from where the workers staged them (staged_dir/<table>/)."""
    tables, written, fresh = {}, {}, []
    for table in shard_store.SHARED_TABLES:
        inherited = carry.tables[table] if carry else shard_store.TableShards()
        new = []
        for f in shard_files(work_dir, table):
            base = os.path.basename(f)
            staged = storage.join(staged_dir, table, base) if staged_dir and base != CARRIED_FILE else None
            entry = shard_store.store(index_dir, table, f, staged, cache=cache)
            if entry.rows == 0 and any(e.name == entry.name for e in new):
                continue  # an empty table is one empty shard, whatever wrote it
            new.append(entry)
            if table == CHUNKS_DIR and base != CARRIED_FILE:
                fresh.append(entry.name)
        folder = os.path.join(work_dir, table)
        if os.path.isdir(folder) and not os.listdir(folder):
            os.rmdir(folder)
        names = {e.name for e in new}
        # a live shard written again (the same bytes): all its rows are this run's, live
        entries = [e for e in inherited.entries if e.name not in names] + new
        deleted = {n: k for n, k in inherited.deleted.items() if n not in names}
        tables[table] = shard_store.TableShards(entries, deleted)
        written[table] = [e.name for e in new]
    return VersionShards(tables, written, fresh, carry.gone_chunk_keys if carry else None)


SHARD_TAG = "__shard"
# Compaction: a shard whose deleted rows pass this fraction is rewritten (its live rows into the
# carried shard) and leaves the list; so are the small shards (nightly runs write small ones) once
# SMALL_SHARDS_MAX of them are listed. Either way only the rows of those shards are written.
MAX_DELETED_FRACTION = 0.5
SMALL_SHARD_ROWS = 20_000
SMALL_SHARDS_MAX = 8


def _inherited_tables(live: LiveIndex, index_dir: str, out_dir: str) -> dict[str, shard_store.TableShards]:
    """The live version's shards per table; a version written before the shared store keeps its
    shards in its own folder: they are put into the store as they are (hard links locally,
    server-side copies on object storage), the live version untouched."""
    out = {}
    for table in shard_store.SHARED_TABLES:
        listing = shard_store.table_shards(live.version_dir, table, live.manifest)
        if listing is None:
            remote = publish.version_dir(index_dir, os.path.basename(live.version_dir.rstrip("/")))
            listing = shard_store.TableShards([
                shard_store.adopt(index_dir, table, f, os.path.join(out_dir, "_adopt"),
                                  storage.join(remote, table, os.path.basename(f)) if is_s3(index_dir) else None)
                for f in shard_files(live.version_dir, table)])
        out[table] = listing
    import shutil
    shutil.rmtree(os.path.join(out_dir, "_adopt"), ignore_errors=True)
    return out


def _tagged_rows(ts: shard_store.TableShards, table: str, source: shard_store.ShardSource,
                 schema: pa.Schema) -> pa.Table:
    """Every live row of a (small) table, with the number of the shard it is in."""
    parts = []
    for i, e in enumerate(ts.entries):
        t = shard_store.read_shard(source.path(table, e.name), table, ts.deleted.get(e.name))
        names = set(t.column_names)
        t = pa.table({f.name: t.column(f.name) if f.name in names else pa.nulls(t.num_rows, f.type)
                      for f in schema}).cast(schema)
        parts.append(t.append_column(SHARD_TAG, pa.array([i] * t.num_rows, pa.int32())))
    if not parts:
        return schema.empty_table().append_column(SHARD_TAG, pa.array([], pa.int32()))
    return pa.concat_tables(parts)


def _tag_counts(rows: pa.Table, table: str, n: int) -> list[pa.Table]:
    """Per shard: its live keys with their row counts (what a summary holds, from the rows)."""
    empty = shard_store.SUMMARY_SCHEMA.empty_table()
    if not rows.num_rows:
        return [empty] * n
    counts = (pa.table({"shard": rows.column(SHARD_TAG), "key": shard_store.row_keys(table, rows)})
              .group_by(["shard", "key"]).aggregate([([], "count_all")]).sort_by("shard"))
    shards = counts.column("shard").to_numpy()
    starts = np.searchsorted(shards, np.arange(n + 1))
    return [pa.table({"key": counts.column("key").slice(a, b - a),
                      "rows": counts.column("count_all").slice(a, b - a).cast(pa.int64())})
            for a, b in zip(starts[:-1], starts[1:])]


def _flat(a) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def _live_summary(summary: pa.Table, deleted: Optional[pa.Array]) -> pa.Table:
    if deleted is None or not len(deleted):
        return summary
    return summary.filter(pc.invert(pc.is_in(summary.column("key"), value_set=deleted)))


def _in_shards(rows: pa.Table, compact: list) -> pa.ChunkedArray:
    numbers = pa.array([i for i, _ in compact], pa.int32()) if compact else pa.array([], pa.int32())
    return pc.is_in(rows.column(SHARD_TAG), value_set=numbers)


def _settle(ts: shard_store.TableShards, live_keys: list[pa.Table], keep: pa.Array):
    """The new list of a table's live shards: in each, the keys not in `keep` are deleted; a shard
    left without a live row is dropped; a mostly deleted one, and the small ones once there are
    SMALL_SHARDS_MAX of them, are compacted. Returns (listing, compacted [(index, entry)] for the
    rows to copy, the keys newly deleted, the rows kept in place or compacted)."""
    entries, deleted, compact, gone, kept_rows = [], {}, [], [], 0
    kept_small = []
    for i, (e, lk) in enumerate(zip(ts.entries, live_keys)):
        alive = pc.is_in(lk.column("key"), value_set=keep) if lk.num_rows else pa.array([], pa.bool_())
        dead_keys = lk.column("key").filter(pc.invert(alive)) if lk.num_rows else pa.array([], pa.string())
        dead_rows = int(pc.sum(lk.column("rows").filter(pc.invert(alive))).as_py() or 0) if lk.num_rows else 0
        gone.append(dead_keys.combine_chunks() if isinstance(dead_keys, pa.ChunkedArray) else dead_keys)
        live_rows = e.live - dead_rows
        kept_rows += max(live_rows, 0)
        if live_rows <= 0:
            continue  # nothing of it is live any more: no longer listed
        entry = shard_store.ShardEntry(e.name, e.rows, e.rows - live_rows)
        if entry.deleted > MAX_DELETED_FRACTION * entry.rows:
            compact.append((i, entry))
            continue
        old = ts.deleted.get(e.name)
        both = [a for a in (old, gone[-1]) if a is not None and len(a)]
        if both:
            deleted[e.name] = pa.concat_arrays([a.cast(pa.string()) for a in both])
        entries.append(entry)
        if entry.live < SMALL_SHARD_ROWS:
            kept_small.append((i, entry))
    if len(kept_small) >= SMALL_SHARDS_MAX:
        names = {e.name for _, e in kept_small}
        compact += kept_small
        entries = [e for e in entries if e.name not in names]
        deleted = {n: k for n, k in deleted.items() if n not in names}
    gone_all = pa.concat_arrays(gone) if gone else pa.array([], pa.string())
    return shard_store.TableShards(entries, deleted), [(i, e) for i, e in sorted(compact, key=lambda x: x[0])], \
        gone_all, kept_rows


def _with_new_paths(docs: pa.Table, carried: set[str], uris_of: dict, rep_of: dict,
                    members_of: dict[str, set[str]]) -> pa.Table:
    """Carried documents with the paths their content is found under tonight and the
    representative's mtime as listed now (its bytes are the same); near-duplicate
    representatives also take their members' paths."""
    by_hash = sorted(carried)
    at = pc.index_in(docs.column("source_hash"), value_set=pa.array(by_hash, pa.string()))
    doc_uris = pa.array([sorted(set(uris_of[h])) for h in by_hash], pa.list_(pa.string())).take(at)
    mtimes = pa.array([float(rep_of[h][3]) for h in by_hash], pa.float64()).take(at)
    hit = pc.is_in(docs.column("doc_id"), pa.array(sorted(members_of), pa.string()))
    if pc.any(hit).as_py():
        reps = docs.filter(hit).select(["doc_id", "source_hash"])
        rep_ids = reps.column("doc_id").to_pylist()
        merged = pa.array([sorted(set(uris_of[h]) | members_of[d])
                           for d, h in zip(rep_ids, reps.column("source_hash").to_pylist())], pa.list_(pa.string()))
        doc_uris = pc.if_else(hit, merged.take(pc.index_in(docs.column("doc_id"), value_set=pa.array(rep_ids))),
                              doc_uris)
    docs = docs.set_column(docs.schema.get_field_index("source_uris"), "source_uris", doc_uris)
    return docs.set_column(docs.schema.get_field_index("mtime"), "mtime", mtimes)


# The rewritten chunks stream: rows are read CARRY_READ_ROWS at a time and written
# CARRY_ROW_GROUP_ROWS to a row group (~10k rows of 384-d vectors plus text and sentence vectors is
# a few tens of MB), so memory holds a row group, never a shard.
CARRY_READ_ROWS = 2048
CARRY_ROW_GROUP_ROWS = 10_000


def _rewrite_chunks(shards: list[tuple], source: shard_store.ShardSource, out_dir: str, kept: pa.Array,
                    moved: pa.Array, moved_uris: pa.Array) -> int:
    """The chunk rows the new version holds in a new shard, written to out_dir/chunks/CARRIED_FILE
    in their live order: those of documents found under new paths (source_uris replaced, nothing
    else touched) and the kept rows of compacted shards. shards: (entry, its deleted keys,
    compacted?) of the shards holding any. Returns how many rows."""
    if not shards:
        return 0
    target = os.path.join(out_dir, CHUNKS_DIR, CARRIED_FILE)
    partial = target + ".partial"  # not *.parquet: no reader takes it for a shard
    os.makedirs(os.path.dirname(target), exist_ok=True)
    writer, rows, schema = None, 0, None
    try:
        for e, deleted, compacted in shards:
            path = source.path(CHUNKS_DIR, e.name)
            if schema is None:
                schema = chunk_schema(embedding_dim(pq.read_schema(path)))
            batches = _moved_or_kept(shard_store.live_batches(path, CHUNKS_DIR, deleted, batch_size=CARRY_READ_ROWS),
                                     schema, kept if compacted else None, moved, moved_uris)
            for group in _row_groups(batches, schema):
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


def _moved_or_kept(batches: Iterable[pa.RecordBatch], schema: pa.Schema, kept: Optional[pa.Array],
                   moved: pa.Array, moved_uris: pa.Array) -> Iterable[pa.RecordBatch]:
    """Rows of moved documents with their new source_uris, and (kept given) the rows of kept
    documents as they are; cast to chunk_schema(dim) (columns added since a shard was written are
    typed nulls): no vector or per-row list is ever a Python object."""
    for batch in batches:
        keys = shard_store.row_keys(CHUNKS_DIR, batch)
        at = pc.index_in(keys, value_set=moved)  # a document listed twice has the same paths in both rows
        keep = pc.is_valid(at)
        if kept is not None:
            keep = pc.or_(keep, pc.is_in(keys, value_set=kept))
        batch, at = batch.filter(keep), at.filter(keep)
        if not batch.num_rows:
            continue
        names = set(batch.schema.names)
        uris = pc.if_else(pc.is_valid(at), moved_uris.take(at), batch.column("source_uris")) \
            if "source_uris" in names else moved_uris.take(at)
        columns = [uris if field.name == "source_uris"
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
                           carried_docs: set[str], counts: dict,
                           kept_keys: Optional[pa.Array] = None) -> dict[str, set[str]]:
    """Carried near-duplicate members keep their near_duplicates rows; returns the
    member paths per representative doc_id (this run's new members and the carried ones), which
    join the carried representatives' source_uris. Members and documents kept one by one
    (kept_keys: document keys, source hash + content hash + doc id) keep theirs too."""
    kept_keys = kept_keys if kept_keys is not None else pa.array([], pa.string())
    from transforms.ingest.neardup import NEAR_DUPLICATES_SCHEMA
    fresh_docs: set[str] = set()
    if shard_files(out_dir, DOCUMENTS_DIR):
        fresh_docs = set(read_table(out_dir, DOCUMENTS_DIR, ["doc_id"]).column(0).to_pylist())
    members: dict[str, set[str]] = {}
    if shard_files(out_dir, NEAR_DUPLICATES_DIR):
        for r in read_table(out_dir, NEAR_DUPLICATES_DIR, ["representative", "member_source_uris"]).to_pylist():
            members.setdefault(r["representative"], set()).update(r["member_source_uris"] or [])
    if shard_files(live_dir, NEAR_DUPLICATES_DIR):
        near = read_table(live_dir, NEAR_DUPLICATES_DIR)
        keep = pc.is_in(near.column("member_source_hash"), pa.array(sorted(carried), pa.string()))
        if len(kept_keys):
            member_keys = pc.binary_join_element_wise(*(pc.fill_null(near.column(c), "") for c in (
                "member_source_hash", "member_content_hash", "member")), KEY_SEP)
            keep = pc.or_(keep, pc.is_in(member_keys, value_set=kept_keys))
        near = near.filter(keep)
        rows = [r for r in near.to_pylist()
                if r["representative"] in carried_docs or r["representative"] in fresh_docs]
        for r in rows:
            r["member_source_uris"] = uris_of[r["member_source_hash"]]
            members.setdefault(r["representative"], set()).update(r["member_source_uris"])
        os.makedirs(os.path.join(out_dir, NEAR_DUPLICATES_DIR), exist_ok=True)
        _write(pa.Table.from_pylist(rows, NEAR_DUPLICATES_SCHEMA), out_dir, NEAR_DUPLICATES_DIR)
        counts["carried_near_duplicates"] = len(rows)
    return members


def _write(table: pa.Table, out_dir: str, name: str) -> None:
    if table.num_rows:
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        pq.write_table(table, os.path.join(out_dir, name, CARRIED_FILE), compression="zstd")
