"""Top-k and row filters over one segment's rows (transforms/query/segment_search.py).

A result is a pair of arrays (scores[b, top_n], row numbers[b, top_n]); slots with no hit hold
-1 and score -inf. A filter is a boolean row mask applied before top-k, so it never costs
results while enough allowed rows exist. `top_rows` is the fast one (the set, unordered);
`_topk_dense` sorts it.
"""
from __future__ import annotations

import json
from typing import Any, Optional

import duckdb
import numpy as np
import pyarrow as pa


def _topk_dense(scores: np.ndarray, top_n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise top_n of a dense (b, n) block, best first; -inf slots become -1."""
    b, n = scores.shape
    k = min(top_n, n)
    idx = np.argpartition(-scores, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (b, 1))
    part = np.take_along_axis(scores, idx, 1)
    order = np.argsort(-part, axis=1, kind="stable")
    s, i = np.take_along_axis(part, order, 1), np.take_along_axis(idx, order, 1)
    out_s = np.full((b, top_n), -np.inf, np.float32)
    out_i = np.full((b, top_n), -1, np.int64)
    out_s[:, :k], out_i[:, :k] = s, np.where(np.isneginf(s), -1, i)
    return out_s, out_i


STRIPES = 64  # top_rows: rows per bucket


def top_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """Row-wise: the columns of the k largest finite values of a (b, n) float block, in no
    order; -1 where a row has fewer than k finite values. Ties at the cut are broken arbitrarily,
    as argpartition breaks them.

    Columns are dealt into n // STRIPES buckets (column c + i * (n // STRIPES) for i < STRIPES),
    the k buckets with the largest maxima are kept, and the top k is taken among their columns:
    every value above the k-th largest lies in a bucket whose maximum beats every bucket left
    out, so the values kept are exactly the top k's. The bucket maxima are STRIPES - 1 element-
    wise maxima of contiguous rows, a few times cheaper than argpartition over the row."""
    b, n = scores.shape
    width = n // STRIPES
    if width <= 4 * k:
        return _topk_dense(scores, k)[1]
    m = width * STRIPES
    bmax = scores[:, :m].reshape(b, STRIPES, width).max(axis=1)
    buckets = np.argpartition(-bmax, k - 1, axis=1)[:, :k]
    cols = (buckets[:, :, None] + (np.arange(STRIPES) * width)[None, None, :]).reshape(b, -1)
    if m < n:  # the last n % STRIPES columns are no bucket's: always candidates
        cols = np.concatenate([cols, np.broadcast_to(np.arange(m, n), (b, n - m))], axis=1)
    vals = np.take_along_axis(scores, cols, 1)
    pick = np.argpartition(-vals, k - 1, axis=1)[:, :k]
    out = np.take_along_axis(cols, pick, 1)
    out[np.isneginf(np.take_along_axis(vals, pick, 1))] = -1
    return out


def build_filter_mask(rows: pa.Table, acl_groups: Optional[list[str]] = None,
                      metadata_filters: Optional[dict[str, Any]] = None) -> np.ndarray:
    """bool[n] over `rows` (chunk_id, acl, metadata) in chunk_id order (a segment's row order).
    Empty/NULL acl = public; otherwise visible when it shares a group with acl_groups.
    metadata_filters: key -> value equality on the JSON metadata (top-level keys; values
    compared as JSON, so 3 != "3")."""
    con = duckdb.connect()
    con.register("chunks", rows)
    conds, params = ["(acl IS NULL OR len(acl) = 0 OR list_has_any(acl, ?::VARCHAR[]))"], [list(acl_groups or [])]
    for key, value in sorted((metadata_filters or {}).items()):
        path = '$."' + str(key).replace('"', '\\"') + '"'
        # json() minifies both sides so formatting differences do not matter
        conds.append("coalesce(json(json_extract(metadata, ?)) = json(?), false)")
        params += [path, json.dumps(value)]
    sql = f"SELECT {' AND '.join(conds)} AS ok FROM chunks ORDER BY chunk_id"
    return con.execute(sql, params).fetchnumpy()["ok"].astype(bool)
