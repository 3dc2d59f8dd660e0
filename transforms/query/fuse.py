"""Reciprocal rank fusion (Cormack et al. 2009): score = sum_r w_r / (k + rank_r).

RRF needs no score calibration between retrievers (cosine vs BM25), which is why
it is the first-stage fusion and also how the reranker folds its order back in.
"""
from __future__ import annotations

from typing import Hashable, Optional

import numpy as np

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


def rrf_fuse_batch(rankings: dict[str, np.ndarray], k: int = 60,
                   weights: Optional[dict[str, float]] = None,
                   top_n: Optional[int] = None, pad: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised RRF for many queries at once.

    rankings: name -> int array (n_queries, depth_r) of ids, best first, `pad`
    where a ranker returned fewer. Returns (ids, scores), each (n_queries, top_n),
    padded with `pad` / 0.0; same scores and tie-break as rrf_fuse.
    """
    names = list(rankings)
    if not names:
        raise ValueError("no rankings")
    n = rankings[names[0]].shape[0]
    ids_parts, contrib_parts, rank_parts = [], [], []
    for name in names:
        ids = np.asarray(rankings[name])
        if ids.ndim != 2 or ids.shape[0] != n:
            raise ValueError(f"ranking {name!r} must be (n_queries, depth)")
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        ranks = np.broadcast_to(np.arange(1, ids.shape[1] + 1), ids.shape)
        ids_parts.append(ids.astype(np.int64))
        contrib_parts.append(np.where(ids == pad, 0.0, w / (k + ranks)))
        rank_parts.append(ranks)
    ids = np.concatenate(ids_parts, axis=1)
    contrib = np.concatenate(contrib_parts, axis=1)
    ranks = np.concatenate(rank_parts, axis=1)
    rows = np.broadcast_to(np.arange(n)[:, None], ids.shape)

    flat_rows, flat_ids = rows.ravel(), ids.ravel()
    flat_c, flat_rank = contrib.ravel(), ranks.ravel()
    # Group (row, id) pairs; within a group the best rank sorts first.
    order = np.lexsort((flat_rank, flat_ids, flat_rows))
    r, i, c, rk = flat_rows[order], flat_ids[order], flat_c[order], flat_rank[order]
    keep = i != pad
    r, i, c, rk = r[keep], i[keep], c[keep], rk[keep]
    if r.size == 0:
        width = top_n or 0
        return np.full((n, width), pad, dtype=np.int64), np.zeros((n, width))
    # A repeat of an id inside one ranker counts once: drop later (row, ranker, id) copies.
    ranker_of = np.concatenate([np.full(p.shape, j) for j, p in enumerate(ids_parts)],
                               axis=1).ravel()[order][keep]
    o2 = np.lexsort((rk, i, ranker_of, r))
    dup = np.zeros(r.size, dtype=bool)
    dup[o2[1:]] = (r[o2[1:]] == r[o2[:-1]]) & (i[o2[1:]] == i[o2[:-1]]) & \
                  (ranker_of[o2[1:]] == ranker_of[o2[:-1]])
    c = np.where(dup, 0.0, c)

    start = np.ones(r.size, dtype=bool)
    start[1:] = (r[1:] != r[:-1]) | (i[1:] != i[:-1])
    starts = np.flatnonzero(start)
    g_score = np.add.reduceat(c, starts)
    g_row, g_id, g_best = r[starts], i[starts], rk[starts]

    # Scatter the groups into a (n, max_groups) table, then sort each row.
    per_row = np.bincount(g_row, minlength=n)
    width = int(per_row.max())
    pos = np.arange(g_row.size) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    t_score = np.full((n, width), -np.inf)
    t_best = np.full((n, width), np.iinfo(np.int64).max, dtype=np.int64)
    t_id = np.full((n, width), np.iinfo(np.int64).max, dtype=np.int64)
    t_score[g_row, pos], t_best[g_row, pos], t_id[g_row, pos] = g_score, g_best, g_id
    srt = np.lexsort((t_id, t_best, -np.round(t_score, _TIE_DECIMALS)), axis=1)
    out_score = np.take_along_axis(t_score, srt, axis=1)
    out_id = np.take_along_axis(t_id, srt, axis=1)
    empty = ~np.isfinite(out_score)
    out_id[empty], out_score[empty] = pad, 0.0
    if top_n is not None:
        if width < top_n:
            out_id = np.pad(out_id, ((0, 0), (0, top_n - width)), constant_values=pad)
            out_score = np.pad(out_score, ((0, 0), (0, top_n - width)))
        out_id, out_score = out_id[:, :top_n], out_score[:, :top_n]
    return out_id, out_score
