"""Fusing the dense and BM25 rankings.

Reciprocal rank fusion (Cormack et al. 2009): score = sum_r w_r / (k + rank_r); it needs no
score calibration between retrievers, and is how the reranker folds its order back in.
Convex fusion (the first-stage default, below) keeps the scores: alpha * norm(dense) +
(1 - alpha) * norm(BM25), which on the dev sets is never below the best single retriever.
"""
from __future__ import annotations

from typing import Callable, Hashable, Optional

import numpy as np

NORMS = ("minmax", "zscore", "max", "bound", "floor")


# Sums of the same terms added in a different order can differ in the last ulp;
# rounding before comparing keeps such ties ties, so the tie-break decides.
_TIE_DECIMALS = 12


def rrf_fuse(rankings: dict[str, list[Hashable]], k: int = 60,
             weights: Optional[dict[str, float]] = None,
             top_n: Optional[int] = None) -> list[tuple[Hashable, float]]:
    """Fuse named ranked id lists (best first) into [(id, score)], best first.

    A ranker missing from `weights` gets weight 1.0. An id repeated within one
    list counts once, at its best rank. Ties: best single rank, then id.
    """
    if k < 0:
        raise ValueError("k must be >= 0")
    scores: dict[Hashable, float] = {}
    best_rank: dict[Hashable, int] = {}
    for name, ids in rankings.items():
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        seen = set()
        for rank, item in enumerate(ids, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
            if rank < best_rank.get(item, 1 << 62):
                best_rank[item] = rank
    order = sorted(scores, key=lambda i: (-round(scores[i], _TIE_DECIMALS), best_rank[i], i))
    if top_n is not None:
        order = order[:top_n]
    return [(i, scores[i]) for i in order]


# --- score-aware fusion -------------------------------------------------------------
# Score-aware fusion of the dense and BM25 rankings (the alternative to rrf_fuse).
#
# RRF throws the scores away: a query where BM25 is sure (one chunk far ahead) and one
# where it is guessing look the same. The convex combination keeps them, on one scale:
#
#     fused(c) = alpha * norm_dense(c) + (1 - alpha) * norm_bm25(c)
#
# where norm is "bound" by default: the cosine as it is and BM25 divided by the query's
# best possible BM25 score (segment_search.gather's bound), so a weak list stays weak; "minmax", "zscore"
# and "max" normalise each retriever per query with statistics of its own top-N list
# (min-max stretches a list of poor matches to 0..1 like a list of perfect ones). A chunk
# that one retriever did not return gets that retriever's exact score when a `fill`
# function is given (dense: the cosine, BM25: the sparse sum), else the list's floor.

def normalise(scores: np.ndarray, ref: np.ndarray, how: str = "minmax") -> np.ndarray:
    """`scores` scaled with statistics of `ref` (the retriever's own top-N scores)."""
    scores = np.asarray(scores, np.float64)
    ref = np.asarray(ref, np.float64)
    if len(ref) == 0:
        return np.zeros_like(scores)
    if how == "minmax":
        lo, hi = ref.min(), ref.max()
        return (scores - lo) / (hi - lo) if hi > lo else np.ones_like(scores)
    if how == "zscore":
        mu, sd = ref.mean(), ref.std()
        return (scores - mu) / sd if sd > 0 else np.zeros_like(scores)
    if how == "max":
        hi = ref.max()
        return scores / hi if hi > 0 else np.zeros_like(scores)
    raise ValueError(f"unknown normalisation {how!r} ({' | '.join(NORMS)})")


# Query-adaptive weight: the dense side gets its full alpha when its first hit leads its tenth by
# LEAD_FULL of the way to a perfect cosine, alpha_min when its top ten are level (a flat dense list
# is a guess, and BM25 should have more say). One value tried, not tuned.
LEAD_FULL = 0.2


def dense_lead(dense_scores: np.ndarray) -> float:
    """How far the dense list's first hit leads its tenth (or last), on the floor scale: 0..1."""
    d = np.sort(np.asarray(dense_scores, np.float64))[::-1]
    if len(d) < 2:
        return 1.0
    ref = d[min(9, len(d) - 1)]
    return float(np.clip((d[0] - ref) / max(1.0 - ref, 1e-9), 0.0, 1.0))


def adaptive_alpha(alpha: float, alpha_min: Optional[float], dense_scores: np.ndarray) -> float:
    """alpha_min + (alpha - alpha_min) * min(1, dense_lead / LEAD_FULL); alpha_min None: alpha."""
    if alpha_min is None:
        return alpha
    return alpha_min + (alpha - alpha_min) * min(1.0, dense_lead(dense_scores) / LEAD_FULL)


def convex_fuse(dense_ids, dense_scores, bm25_ids, bm25_scores, alpha: float = 0.5,
                norm: str = "minmax", top_n: Optional[int] = None,
                dense_fill: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                bm25_fill: Optional[Callable[[np.ndarray], np.ndarray]] = None,
                bm25_bound: Optional[float] = None, alpha_min: Optional[float] = None) -> list[tuple[int, float]]:
    """One query: [(chunk_no, fused score)], best first; ties by chunk_no.

    ids/scores: each retriever's ranked list (-1 slots ignored). fill(ids) -> exact raw
    scores of ids absent from that retriever's list (optional). norm "bound": the cosine as
    it is and BM25 divided by `bm25_bound` (the query's best possible score, segment_search.gather),
    so neither side is stretched to 0..1 when its best match is weak. "floor": BM25 as bound,
    the cosine as (cos - f) / (1 - f), f the dense list's lowest score: a model whose cosines all
    sit high (e5) gets the same say as one whose cosines spread (MiniLM). alpha_min: the weight
    follows the dense list's lead (adaptive_alpha), from alpha_min (flat) up to alpha."""
    d_ids, d_s = _valid(dense_ids, dense_scores)
    b_ids, b_s = _valid(bm25_ids, bm25_scores)
    union = np.union1d(d_ids, b_ids)
    if not len(union):
        return []
    nd = _scores_on(union, d_ids, d_s, dense_fill)
    nb = _scores_on(union, b_ids, b_s, bm25_fill)
    alpha = adaptive_alpha(alpha, alpha_min, d_s)
    if norm in ("bound", "floor"):
        if norm == "floor" and len(d_s):  # the cosine above the list's last hit: each model's own scale
            lo = float(d_s.min())
            nd = (nd - lo) / max(1.0 - lo, 1e-9)
        f = alpha * nd + (1 - alpha) * (nb / bm25_bound if bm25_bound else np.zeros_like(nb))
    else:
        f = alpha * normalise(nd, d_s, norm) + (1 - alpha) * normalise(nb, b_s, norm)
    order = np.lexsort((union, -np.round(f, 12)))
    if top_n is not None:
        order = order[:top_n]
    return [(int(union[i]), float(f[i])) for i in order]


def _valid(ids, scores):
    ids = np.asarray(ids, np.int64).reshape(-1)
    scores = np.asarray(scores, np.float64).reshape(-1)
    keep = (ids >= 0) & np.isfinite(scores)
    return ids[keep], scores[keep]


def _scores_on(union: np.ndarray, ids: np.ndarray, scores: np.ndarray, fill) -> np.ndarray:
    """Raw scores of `union` members: from the list where present, else fill() or the list's floor."""
    out = np.full(len(union), scores.min() if len(scores) else 0.0, np.float64)
    if len(ids):
        order = np.argsort(ids)
        pos = np.searchsorted(ids[order], union)
        pos = np.clip(pos, 0, len(ids) - 1)
        hit = ids[order][pos] == union
        out[hit] = scores[order][pos[hit]]
    else:
        hit = np.zeros(len(union), bool)
    if fill is not None and (~hit).any():
        out[~hit] = np.asarray(fill(union[~hit]), np.float64)
    return out


def postings_sum(ptr, post_doc, post_w, term_ids, rows) -> np.ndarray:
    """Sum of the posting weights of `term_ids` at each of `rows`, from term-major postings (rows
    ascending within a term), terms added in the order given: the one exact BM25 fill."""
    rows = np.asarray(rows, np.int64)
    out = np.zeros(len(rows), np.float64)
    for t in np.asarray(term_ids, np.int64):
        lo, hi = int(ptr[t]), int(ptr[t + 1])
        if hi <= lo:
            continue
        docs = post_doc[lo:hi]
        pos = np.clip(np.searchsorted(docs, rows), 0, hi - lo - 1)
        hit = docs[pos] == rows
        out[hit] += post_w[lo + pos[hit]]
    return out
