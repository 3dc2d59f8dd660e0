"""Run summary and manifest: counts that reconcile, written beside the version."""
from __future__ import annotations

import os
import platform

from configs.schema import Config
from transforms import publish
from transforms.embed import ModelSpec, POOLING


def reconcile(counters: dict[str, int], listed: int) -> dict:
    """read = unique parsed + duplicates + dead-lettered; `balanced` says whether it holds."""
    c = lambda k: int(counters.get(k, 0))  # noqa: E731
    dead_objects = c("read_errors") + c("dead_lettered_parse")
    summary = {
        "listed": listed,
        "read": c("read_objects") + c("read_errors"),
        "unique": c("unique_objects"),
        "duplicates": c("duplicate_objects"),
        "parsed": c("parsed_objects"),
        "dead_lettered": dead_objects,
        "dead_lettered_lines": c("dead_lettered_lines"),
        "documents": c("documents"),
        "dead_lettered_documents": c("dead_lettered_chunk"),
        "chunks": c("chunks"),
        "embedded": c("embedded"),
        "bytes_read": c("read_bytes"),
    }
    summary["balanced"] = (summary["read"] == listed
                           and summary["read"] == summary["parsed"] + summary["duplicates"] + dead_objects)
    return summary


def write_run_outputs(version_dir: str, cfg: Config, spec: ModelSpec, summary: dict,
                      pipeline_version: str) -> None:
    from transforms.chunk import CHUNKER_VERSION
    from transforms.contextualize import make_contextualizer
    from transforms.parse import PARSER_VERSION

    manifest = {
        "version": summary["version"],
        "model": {"id": spec.model_id, "sha256": spec.model_sha256, "pooling": POOLING,
                  "max_length": spec.max_length, "namespace": spec.namespace},
        "versions": {"pipeline": pipeline_version, "parser": PARSER_VERSION, "chunker": CHUNKER_VERSION,
                     "contextualizer": make_contextualizer(cfg.contextualize.kind).version},
        "config": cfg.model_dump(mode="json", exclude={"s3"}),  # never write secrets
        "counts": {k: summary[k] for k in ("documents", "chunks", "dead_lettered", "duplicates")},
        "artifact": summary.get("artifact", {}),
        "python": platform.python_version(),
    }
    publish.write_json(os.path.join(version_dir, "manifest.json"), manifest)
    publish.write_json(os.path.join(version_dir, "summary.json"), summary)


def format_summary(s: dict) -> str:
    rate = s["embedded"] / s["pipeline_s"] if s.get("pipeline_s") else 0.0
    docs_rate = s["parsed"] / s["pipeline_s"] if s.get("pipeline_s") else 0.0
    a = s.get("artifact") or {}
    lines = [
        f"version      {s['version']}  (input {s['input']})",
        f"objects      read {s['read']} = parsed {s['parsed']} + duplicates {s['duplicates']}"
        f" + dead-lettered {s['dead_lettered']}   [{'ok' if s['balanced'] else 'DOES NOT RECONCILE'}]",
        f"documents    {s['documents']}  (bad JSONL lines dead-lettered: {s['dead_lettered_lines']})",
        f"chunks       {s['chunks']} chunked, {s['embedded']} embedded",
        f"time         {s['wall_s']:.1f} s wall, pipeline {s['pipeline_s']:.1f} s"
        f"  ({docs_rate:.1f} objects/s, {rate:.1f} chunks/s)",
    ]
    if a:
        lines.append(f"artifact     {a.get('rows')} rows, build {a.get('build_s')} s,"
                     f" HNSW recall@10 vs exact {a.get('hnsw_recall_at_10')}")
    return "\n".join(lines)
