"""Run summary and manifest: counts that reconcile, written beside the version."""
from __future__ import annotations

import os
import platform
from typing import Optional

from configs.schema import Config
from transforms.common import storage
from transforms.ingest.embed import ModelSpec


def reconcile(counters: dict[str, int], listed: int, skipped: int = 0) -> dict:
    """listed = unchanged (not re-read) + read; read = parsed + duplicates + carried + dead-lettered;
    documents = parsed documents - duplicate documents - near-duplicates - documents kept from the
    live version (unchanged documents of a file re-read for the near-duplicate members in it)."""
    c = lambda k: int(counters.get(k, 0))  # noqa: E731
    dead_objects = c("read_errors") + c("dead_lettered_parse")
    summary = {
        "listed": listed,
        "unchanged_not_read": skipped,
        "read": c("read_objects") + c("read_errors"),
        "carried_read": c("carried_objects"),
        "unique": c("unique_objects"),
        "duplicates": c("duplicate_objects"),
        "parsed": c("parsed_objects"),
        "dead_lettered": dead_objects,
        "dead_lettered_lines": c("dead_lettered_lines"),
        "dead_lettered_pages": c("dead_lettered_pages"),  # PDF pages OCR could not read (rest indexed)
        # documents of files re-read only for near-duplicate members in them, kept as the live
        # version holds them (transforms/ingest/dedupe.py KeepLiveDocuments): not processed again
        "documents": c("documents") - c("duplicate_documents") - c("near_duplicates") - c("kept_documents"),
        "kept_documents": c("kept_documents"),
        "parsed_documents": c("documents"),
        "duplicate_documents": c("duplicate_documents"),  # JSONL records repeated verbatim across files
        "near_duplicates": c("near_duplicates"),  # near-copies: sources of their representative, not chunked
        "dead_lettered_documents": c("dead_lettered_chunk"),
        "chunks": c("chunks"),
        "embedded": c("embedded"),
        "cache_hits": c("cache_hits"),
        "bytes_read": c("read_bytes"),
    }
    if "llm_contexts_written" in counters or "llm_contexts_failed" in counters:  # contextualize.kind: llm
        summary["llm_contexts_written"] = c("llm_contexts_written")
        summary["llm_contexts_failed"] = c("llm_contexts_failed")  # chunks left with their title path
        summary["llm_contexts_cut"] = c("llm_contexts_cut")  # replies cut to chunk.context_tokens before caching
    # every parsed document is one that was chunked (indexed, empty or dead-lettered in chunking),
    # a verbatim duplicate or a near-duplicate: the chunk stage's document rows plus its failures
    chunked_documents = c("document_rows") + c("dead_lettered_chunk")
    problems = []
    if summary["read"] + skipped != listed:
        problems.append(f"listed {listed} != unchanged {skipped} + read {summary['read']}")
    accounted = summary["parsed"] + summary["duplicates"] + summary["carried_read"] + dead_objects
    if summary["read"] != accounted:
        problems.append(f"read {summary['read']} != parsed {summary['parsed']} + duplicates {summary['duplicates']}"
                        f" + carried {summary['carried_read']} + dead-lettered {dead_objects}")
    if "document_rows" in counters and chunked_documents != summary["documents"]:
        problems.append(f"documents {summary['documents']} != chunked {c('document_rows')}"
                        f" + dead-lettered in chunking {c('dead_lettered_chunk')}")
    summary["balanced"] = not problems
    summary["reconcile_problems"] = problems
    return summary


def write_run_outputs(version_dir: str, cfg: Config, spec: ModelSpec, summary: dict,
                      versions: dict, processing_key: str, segmented: Optional[dict] = None,
                      tables: Optional[dict] = None) -> None:
    """manifest.json and summary.json; `segmented` (pipelines/segments.py) gives the version's
    segments, in order, and its corpus-wide BM25 statistics; `tables` the shared shards it lists
    (transforms/index/shard_store.py)."""
    manifest = {
        "version": summary["version"],
        "model": model_record(spec),
        "versions": versions,
        "processing_key": processing_key,
        "config": manifest_config(cfg),  # never write secrets
        "counts": {k: summary.get(k, 0) for k in ("documents", "chunks", "dead_lettered", "duplicates",
                                                   "near_duplicates")},
        "artifact": summary.get("artifact", {}),
        "python": platform.python_version(),
    }
    if tables is not None:
        manifest["tables"] = tables
    if segmented:
        manifest["segments"] = segmented["segments"]
        manifest["bm25"] = segmented["bm25"]
        manifest["tombstones"] = sum(s["deleted"] for s in segmented["segments"])
    storage.write_json(os.path.join(version_dir, "manifest.json"), manifest)
    from transforms.common.redact import redact_values
    storage.write_json(os.path.join(version_dir, "summary.json"), redact_values(summary))  # no secret in it


def model_record(spec: ModelSpec) -> dict:
    """The manifest's `model`: the file and every convention the answer job must repeat
    (transforms.query.engine.check_model compares them)."""
    return {"id": spec.model_id, "sha256": spec.model_sha256, "profile": spec.profile_name,
            "pooling": spec.pooling, "query_prefix": spec.query_prefix,
            "passage_prefix": spec.passage_prefix, "normalize": spec.normalize,
            "max_length": spec.max_length, "namespace": spec.namespace}


def manifest_config(cfg: Config) -> dict:
    """The config as it is written anywhere (the manifest, the eval report): every secret key the
    schema declares (or names like a credential) shown as ***, credential-like runner options
    masked, and the user info of every URL in it masked (transforms/common/redact.mask_config)."""
    from transforms.common.redact import mask_config
    return mask_config(cfg)


def format_summary(s: dict) -> str:
    rate = s["embedded"] / s["pipeline_s"] if s.get("pipeline_s") else 0.0
    docs_rate = s["parsed"] / s["pipeline_s"] if s.get("pipeline_s") else 0.0
    a = s.get("artifact") or {}
    lines = [
        f"version      {s['version']}  (input {s['input']})",
        f"objects      listed {s['listed']} = unchanged {s['unchanged_not_read']} + read {s['read']};"
        f" read = parsed {s['parsed']} + duplicates {s['duplicates']} + carried {s['carried_read']}"
        f" + dead-lettered {s['dead_lettered']}   [{'ok' if s['balanced'] else 'DOES NOT RECONCILE'}]",
        f"changes      added {s.get('added', 0)}, changed {s.get('changed', 0)}, removed {s.get('removed', 0)},"
        f" carried over {s.get('carried_documents', 0)} documents / {s.get('carried_chunks', 0)} chunks",
        f"documents    {s['documents']} = parsed {s.get('parsed_documents', s['documents'])}"
        f" - duplicates {s.get('duplicate_documents', 0)} - near-duplicates {s.get('near_duplicates', 0)}"
        + (f" - kept {s['kept_documents']}" if s.get("kept_documents") else "") +
        f" (+ {s.get('carried_near_duplicates', 0)} near-duplicates carried over)"
        f"  (bad JSONL lines dead-lettered: {s['dead_lettered_lines']}, unreadable scanned pages: {s.get('dead_lettered_pages', 0)})",
    ] + ([f"skipped      at listing, not indexed: " + ", ".join(f"{k} {v}" for k, v in
                                                            sorted(s["skipped_at_listing"].items()))]
         if s.get("skipped_at_listing") else []) + [
        f"chunks       {s['chunks']} chunked, {s['embedded']} embedded, {s['cache_hits']} from the embedding cache"
        + (f"; llm contexts {s['llm_contexts_written']} written, {s['llm_contexts_failed']} failed (title path kept)"
           + (f", {s['llm_contexts_cut']} cut to chunk.context_tokens" if s.get("llm_contexts_cut") else "")
           if "llm_contexts_written" in s else ""),
        f"time         {s['wall_s']:.1f} s wall, pipeline {s['pipeline_s']:.1f} s"
        f"  ({docs_rate:.1f} objects/s, {rate:.1f} chunks/s)",
    ]
    if a:
        lines.append(f"segments     {a.get('segments')} listed ({a.get('reused', 0)} reused, {a.get('built', 0)} built,"
                     f" {a.get('merged', 0)} merged, {a.get('tombstones', 0)} tombstones), {a.get('rows')} live rows,"
                     f" {a.get('artifact_s')} s")
    return "\n".join(lines)
