"""Top-k and row filters over one segment's rows (transforms/query/segment_search.py).

A result is a pair of arrays (scores[b, top_n], row numbers[b, top_n]); slots with no hit hold
-1 and score -inf. A filter is a boolean row mask applied before top-k, so it never costs
results while enough allowed rows exist.
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
