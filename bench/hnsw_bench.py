"""3. HNSW (DuckDB vss): build time, per-query latency and recall@10 vs exact search, on real questions."""
from __future__ import annotations

import os

import numpy as np

from bench.common import best_of, timed
from bench.table import Figure, Report

SECTION = "3. HNSW vs exact search"


def bench_hnsw(cfg, index: dict, qvecs: np.ndarray, report: Report, k: int = 10) -> None:
    from transforms.index.artifacts import build_artifact, open_artifact
    from transforms.index.shards import CHUNKS_DIR, shard_files
    from transforms.query.retrieve import DenseIndex, search_hnsw

    # The index job searches segments exactly and builds no HNSW; this section builds the DuckDB
    # HNSW artifact from the same shards to measure what it would cost and buy (why it is not built).
    h = cfg.artifacts.hnsw
    db = os.path.join(index["version_dir"], "..", "..", "hnsw-bench.duckdb")
    art = build_artifact(shard_files(index["version_dir"], CHUNKS_DIR), db, hnsw_m=h.m,
                         hnsw_ef_construction=h.ef_construction, hnsw_ef_search=h.ef_search, with_hnsw=True)
    con = open_artifact(db, read_only=True, ef_search=h.ef_search)
    try:
        with timed() as t_load:
            dense = DenseIndex.from_artifact(con)
        n = len(qvecs)
        search_hnsw(con, qvecs[:2], k), dense.search(qvecs[:2], k)  # warm-up
        with timed() as t_h:
            approx = np.concatenate([search_hnsw(con, qvecs[i:i + 1], k)[1] for i in range(n)])
        one_by_one = best_of(lambda: [dense.search(qvecs[i:i + 1], k) for i in range(n)])
        batched = best_of(lambda: dense.search(qvecs, k), repeats=5)
        _, exact = dense.search(qvecs, k)
    finally:
        con.close()
    recall = float(np.mean([len(set(e[e >= 0]) & set(a[a >= 0])) / k for e, a in zip(exact, approx)]))
    rows = art.get("rows", dense.n)
    os.remove(db)
    report.add(Figure(SECTION, f"HNSW build ({rows} vectors, M={h.m}, ef_c={h.ef_construction})",
                      art.get("hnsw_s", float("nan")), "s", t_load.s, "exact: load the matrix from DuckDB",
                      note=f"whole artifact build {art.get('build_s', float('nan')):.2f} s"))
    report.add(Figure(SECTION, f"HNSW latency per query (ef_search={h.ef_search}, {n} q)", 1e3 * t_h.s / n, "ms",
                      1e3 * one_by_one / n, "exact DenseIndex.search, one query at a time (best of 3)"))
    report.add(Figure(SECTION, "exact latency per query, whole batch in one matmul (best of 5)", 1e3 * batched / n, "ms",
                      1e3 * t_h.s / n, "HNSW per query"))
    report.add(Figure(SECTION, f"HNSW recall@{k} on the real questions", recall, "", 1.0, "exact search"))
    if "hnsw_recall_at_10" in art:
        report.add(Figure(SECTION, "HNSW recall@10 at build (chunk-sentence probes)", art["hnsw_recall_at_10"], "",
                          1.0, "exact search", note=f"{art.get('hnsw_recall_queries')} probes"))
