"""Build a version's DuckDB artifact from its Parquet shards, and measure HNSW recall.

Used at the end of `ragbeam index` and by `ragbeam build-artifacts`, which
rebuilds from the shards alone (the shards are the source of truth).
"""
from __future__ import annotations

import os

import numpy as np

from configs.schema import Config
from transforms.index.artifacts import build_artifact, open_artifact, write_meta
from transforms.query.retrieve import choose_dense_mode, hnsw_recall_at_k
from transforms.ingest.embed import Embedder, ModelSpec
from transforms.common.sentences import split_sentences
from transforms.index.shards import CHUNKS_DIR, read_table, shard_files

ARTIFACT_FILE = "index.duckdb"


def recall_queries(version_dir: str, sample: int, seed: int = 0) -> list[str]:
    """Question-like probes: the first sentence of a deterministic sample of chunks."""
    texts = read_table(version_dir, CHUNKS_DIR, ["chunk_id", "text"]).sort_by("chunk_id")
    ids = texts.column("text").to_pylist()
    if not ids:
        return []
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(ids), size=min(sample, len(ids)), replace=False)
    out = []
    for i in sorted(picks):
        sents = split_sentences(ids[i])
        if sents:
            out.append(sents[0][:300])
    return out


def needs_hnsw(chunk_files: list[str], cfg: Config) -> bool:
    """Build the HNSW index only when the configured `retrieve.mode` searches it at this
    row count (choose_dense_mode); small corpora are searched exactly and never use it."""
    import pyarrow.parquet as pq
    rows = sum(pq.read_metadata(f).num_rows for f in chunk_files)
    return choose_dense_mode(rows, cfg.retrieve.mode) == "hnsw"


def build_version_artifact(version_dir: str, cfg: Config, spec: ModelSpec,
                           embedder: Embedder | None = None) -> dict:
    db_path = os.path.join(version_dir, ARTIFACT_FILE)
    h = cfg.artifacts.hnsw
    files = shard_files(version_dir, CHUNKS_DIR)
    with_hnsw = needs_hnsw(files, cfg)
    stats = build_artifact(files, db_path, hnsw_m=h.m, hnsw_ef_construction=h.ef_construction,
                           hnsw_ef_search=h.ef_search, with_hnsw=with_hnsw)
    stats["hnsw"] = with_hnsw
    if cfg.artifacts.recall_sample and with_hnsw:  # no index: exact search, nothing to measure
        if cfg.artifacts.recall_questions:
            from transforms.query.questions.read import read_questions
            queries = [q.question for q in read_questions(cfg.artifacts.recall_questions)
                       if not isinstance(q, dict)][:cfg.artifacts.recall_sample]
        else:
            queries = recall_queries(version_dir, cfg.artifacts.recall_sample)
        if queries:
            embedder = embedder or Embedder(spec)
            qvecs = embedder.encode_queries(queries)  # they stand in for questions
            con = open_artifact(db_path, read_only=False)
            try:
                recall = hnsw_recall_at_k(con, qvecs, k=10)
                write_meta(con, {"hnsw_recall_at_10": recall, "hnsw_recall_queries": len(queries)})
                con.execute("CHECKPOINT")
            finally:
                con.close()
            stats["hnsw_recall_at_10"] = round(recall, 4)
            stats["hnsw_recall_queries"] = len(queries)
    return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in stats.items()}
