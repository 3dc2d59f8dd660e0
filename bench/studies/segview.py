"""What the studies read from an index version, taken from its segments.

Before segments the engine held one DuckDB artifact and the studies read its parts
(`engine.dense.matrix`, `engine.bm25`, `engine.sentences`, `engine.chunks`). QAEngine now searches
a version's segments (transforms/query/version_segments.py, segment_search.py); these helpers
give the studies the same figures from there. Chunk numbers are version-global (segment offset
+ local row). A tombstoned row keeps its number but is never live; the artifact held live rows
only, so what it counted over every chunk is counted here over the live ones.
"""
from __future__ import annotations

from typing import Optional

import numpy as np


def live_mask(engine) -> np.ndarray:
    """bool[n] over the version's chunk numbers: rows no tombstone hides."""
    return np.concatenate([s.live for s in engine.searchers]) if engine.searchers else np.zeros(0, bool)


def live_texts(engine) -> list[str]:
    """The live chunks' texts in chunk-number order (what the artifact's `chunks.text` held)."""
    return [t for s in engine.searchers
            for t, ok in zip(s.seg.rows.column("text").to_pylist(), s.live) if ok]


def searchers_with_bm25(engine, k1: float, b: float) -> list:
    """The version's segments as SegmentSearchers whose BM25 weights use these k1/b (the same
    corpus-wide statistics as the engine's own searchers, engine.open_searcher)."""
    from transforms.query.segment_search import SegmentSearcher
    vs = engine.segments
    out = []
    for i in range(len(vs)):
        df, dead = vs.stats(i)
        out.append(SegmentSearcher(vs.segment(i), int(vs.offsets[i]), df, dead, vs.num_docs, vs.avgdl,
                                   k1=float(k1), b=float(b)))
    return out


def first_stage(engine, texts: list[str], qvecs: np.ndarray, depth: int, allowed=None,
                searchers: Optional[list] = None) -> list:
    """Per question its dense and BM25 lists `depth` deep, [(chunk_no, score)] best first, with
    .cos_of / .bm25_of (exact scores of every hit either list holds) and .bm25_bound.
    searchers=None: the engine's own first stage (QAEngine.search); else the same search and
    gather over the given searchers (e.g. searchers_with_bm25)."""
    if searchers is None:
        return engine.search(texts, allowed, qvecs, dense_n=depth, bm25_n=depth)
    from transforms.query.segment_search import gather
    terms, words = engine.analyze(texts)
    qn = qvecs / np.clip(np.linalg.norm(qvecs, axis=1, keepdims=True), 1e-12, None)  # as QAEngine.search
    per_seg = [s.search(terms, words, qn, depth, depth, allowed=allowed) for s in searchers]
    return [gather([hits[j] for hits in per_seg], terms[j], depth, depth, engine.num_docs)
            for j in range(len(texts))]


def as_arrays(pairs) -> tuple[np.ndarray, np.ndarray]:
    """[(chunk_no, score)] as (chunk_nos int64, scores float64): the old (ids, scores) rows."""
    return (np.array([c for c, _ in pairs], np.int64).reshape(-1),
            np.array([s for _, s in pairs], np.float64).reshape(-1))


def exact_fill(score_of: dict):
    """fill(chunk_nos) -> their exact scores from a ranking's cos_of / bm25_of (fuse.convex_fuse)."""
    return lambda cs: np.array([score_of[int(c)] for c in cs], np.float64)
