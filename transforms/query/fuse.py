"""Reciprocal rank fusion (Cormack et al. 2009): score = sum_r w_r / (k + rank_r).

RRF needs no score calibration between retrievers (cosine vs BM25), which is why
it is the first-stage fusion and also how the reranker folds its order back in.
"""
from __future__ import annotations

from typing import Hashable, Optional


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
