"""Batch retrieval over an artifact built by transforms.index.artifacts.

Per-question SQL is too slow for millions of questions (vss HNSW ~12-23 ms/query,
fts match_bm25 ~55-200 ms/query), so both indexes are loaded once into memory and a
whole batch is scored with one matrix product. Every result is a pair of arrays
(scores[b, top_n], chunk_nos[b, top_n]); slots with no hit hold chunk_no -1 and
score -inf. Filters are boolean row masks applied before top-k, so a filter
never costs results while enough allowed rows exist.
"""
from __future__ import annotations

import json
from typing import Any, Optional, Union

import duckdb
import numpy as np
import pyarrow as pa

from transforms.index.artifacts import DISTANCE_FN, FTS_SCHEMA, read_meta
from transforms.index.bm25 import ANALYZER_VERSION, Analyzer

EXACT_MAX_ROWS = 200_000
_SCORE_BLOCK = 1 << 25  # floats per (queries x rows) score block: 128 MiB


def choose_dense_mode(n_rows: int, mode: str = "auto", exact_max_rows: int = EXACT_MAX_ROWS) -> str:
    """exact | hnsw. auto: exact below exact_max_rows (a batched matmul beats
    per-query SQL there); the HNSW index only pays off on large corpora."""
    if mode in ("exact", "hnsw"):
        return mode
    if mode != "auto":
        raise ValueError(f"dense mode {mode!r}")
    return "exact" if n_rows <= exact_max_rows else "hnsw"


def _normalise(q: np.ndarray) -> np.ndarray:
    q = np.atleast_2d(np.asarray(q, np.float32))
    norms = np.linalg.norm(q, axis=1, keepdims=True)
    return q / np.where(norms == 0, 1, norms)


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


def _row_mask(allowed: Optional[np.ndarray], rows: slice) -> Optional[np.ndarray]:
    """allowed is None, one (n,) mask for the batch, or one (b, n) mask per query."""
    if allowed is None:
        return None
    return allowed if allowed.ndim == 1 else allowed[rows]


class DenseIndex:
    """The embedding matrix (row i = chunk_no i) for exact cosine search."""

    def __init__(self, matrix: np.ndarray):
        self.matrix = _normalise(matrix)  # stored vectors are unit already; cheap insurance

    @classmethod
    def from_artifact(cls, con: duckdb.DuckDBPyConnection) -> "DenseIndex":
        tbl = con.execute("SELECT embedding FROM chunks ORDER BY chunk_no").to_arrow_table()
        col = tbl.column(0).combine_chunks()
        flat = col.flatten().to_numpy(zero_copy_only=False)
        return cls(flat.reshape(len(col), col.type.list_size))  # FLOAT[dim]: the model's ModelSpec.dim

    @property
    def n(self) -> int:
        return self.matrix.shape[0]

    def search(self, qvecs: np.ndarray, top_n: int, allowed: Optional[np.ndarray] = None):
        q = _normalise(qvecs)
        out_s = np.empty((len(q), top_n), np.float32)
        out_i = np.empty((len(q), top_n), np.int64)
        step = max(1, _SCORE_BLOCK // max(self.n, 1))  # bound the (b, n) score block
        for lo in range(0, len(q), step):
            rows = slice(lo, lo + step)
            scores = q[rows] @ self.matrix.T
            mask = _row_mask(allowed, rows)
            if mask is not None:  # -inf before top-k: filtered rows never take a slot
                np.copyto(scores, -np.inf, where=~mask)  # broadcasts a (n,) mask; fancy indexing is ~3x slower
            out_s[rows], out_i[rows] = _topk_dense(scores, top_n)
        return out_s, out_i


def _vec_sql(v: np.ndarray) -> str:
    # Inline literal: vss needs a constant vector to plan HNSW_INDEX_SCAN, and a
    # bound parameter measured ~4x slower.
    return "[" + ",".join(repr(float(x)) for x in v) + f"]::FLOAT[{len(v)}]"


def search_hnsw(con: duckdb.DuckDBPyConnection, qvecs: np.ndarray, top_n: int,
                allowed: Optional[np.ndarray] = None, oversample: int = 4):
    """One SQL query per vector through the vss index (approximate). With a mask,
    fetches top_n*oversample and filters; a query left short falls back to an exact
    scan restricted to the allowed rows, so filters still fill top_n."""
    meta = read_meta(con)
    metric = meta.get("metric", "cosine")
    fn = DISTANCE_FN[metric]
    q = _normalise(qvecs)
    out_s = np.full((len(q), top_n), -np.inf, np.float32)
    out_i = np.full((len(q), top_n), -1, np.int64)
    for j, v in enumerate(q):
        mask = _row_mask(allowed, slice(j, j + 1))
        mask = None if mask is None else np.asarray(mask).reshape(-1)
        lim = top_n if mask is None else top_n * oversample
        rows = con.execute(f"SELECT chunk_no, {fn}(embedding, {_vec_sql(v)}) AS d FROM chunks "
                           f"ORDER BY d LIMIT {int(lim)}").fetchall()
        if mask is not None:
            rows = [r for r in rows if mask[r[0]]]
            if len(rows) < top_n and len(rows) < int(mask.sum()):
                con.register("allowed_rows", pa.table({"chunk_no": np.flatnonzero(mask).astype(np.int32)}))
                try:
                    rows = con.execute(
                        f"SELECT c.chunk_no, {fn}(c.embedding, {_vec_sql(v)}) AS d FROM chunks c "
                        f"SEMI JOIN allowed_rows a ON c.chunk_no = a.chunk_no ORDER BY d LIMIT {int(top_n)}"
                    ).fetchall()
                finally:
                    con.unregister("allowed_rows")
        rows = rows[:top_n]
        if rows:
            out_i[j, :len(rows)] = [r[0] for r in rows]
            d = np.array([r[1] for r in rows], np.float32)
            out_s[j, :len(rows)] = 1 - d if metric == "cosine" else -d  # higher = better
    return out_s, out_i


class BM25Index:
    """fts's index tables as a term-major sparse matrix (CSR by hand: numpy only,
    scipy is not a dependency) of BM25 term weights, loaded once.

    Same formula as fts match_bm25 (note DuckDB log() is log10):
      w(t, d) = log10((N - df + 0.5) / (df + 0.5) + 1) * tf (k1+1) / (tf + k1 (1 - b + b len/avgdl))
    and a query scores the sum of w over its DISTINCT terms, so scores equal
    match_bm25(chunk_no, ' '.join(analyzed query)) up to float32 error.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, k1: Optional[float] = None,
                 b: Optional[float] = None):
        meta = read_meta(con)
        if meta.get("bm25_analyzer") != ANALYZER_VERSION:  # queries would not match the index
            raise ValueError(f"artifact tokenised by {meta.get('bm25_analyzer')!r}, "
                             f"this code uses {ANALYZER_VERSION!r}: rebuild the artifact")
        self.k1 = float(meta.get("bm25_k1", 1.2) if k1 is None else k1)
        self.b = float(meta.get("bm25_b", 0.75) if b is None else b)
        self.analyzer = Analyzer(con, meta.get("bm25_stemmer", "porter"))
        self.n = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        num_docs, avgdl = con.execute(f"SELECT num_docs, avgdl FROM {FTS_SCHEMA}.stats").fetchone()
        self.vocab = dict(con.execute(f"SELECT term, termid FROM {FTS_SCHEMA}.dict").fetchall())
        n_terms = (max(self.vocab.values()) + 1) if self.vocab else 0
        # tf per (term, doc) with the doc's chunk_no (docs.name), length and the term's df
        tf = con.execute(f"""
            SELECT t.termid, d.name AS chunk_no, count(*) AS tf, any_value(d.len) AS len,
                   any_value(dict.df) AS df
            FROM {FTS_SCHEMA}.terms t JOIN {FTS_SCHEMA}.docs d USING (docid)
            JOIN {FTS_SCHEMA}.dict dict USING (termid)
            GROUP BY t.termid, d.name ORDER BY t.termid, d.name""").fetchnumpy()
        tfv, df = tf["tf"].astype(np.float64), tf["df"].astype(np.float64)
        idf = np.log10((num_docs - df + 0.5) / (df + 0.5) + 1)
        norm = self.k1 * (1 - self.b + self.b * tf["len"].astype(np.float64) / avgdl)
        self.post_w = (idf * tfv * (self.k1 + 1) / (tfv + norm)).astype(np.float32)
        self.post_doc = tf["chunk_no"].astype(np.int64)
        counts = np.bincount(tf["termid"].astype(np.int64), minlength=n_terms)
        self.term_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        # each term's highest weight in any chunk: a query's bound() is the score of a chunk
        # holding every query term at its best, so score / bound is comparable across queries
        self.term_max = np.zeros(n_terms, np.float64)
        has = counts > 0
        if has.any():
            self.term_max[has] = np.maximum.reduceat(self.post_w.astype(np.float64), self.term_ptr[:-1][has])

        # a query term the index has never seen scores nothing, but it is part of what was asked:
        # it counts in the bound as a term seen once in one average-length chunk would
        self.unseen_term_weight = float(np.log10((num_docs - 1 + 0.5) / (1 + 0.5) + 1))

    def analyze(self, queries: list[str]) -> tuple[list[np.ndarray], np.ndarray]:
        """One analysis of a batch: per query, its distinct known term ids (match_bm25 also
        dedups query terms) and its best possible BM25 score, the known terms' highest
        weights plus unseen_term_weight for each distinct term the index does not hold. A
        chunk's score over that bound says how much of the question it matches, on one scale
        for all questions."""
        terms, bounds = [], np.zeros(len(queries), np.float64)
        for j, toks in enumerate(self.analyzer.analyze(queries)):
            distinct = set(toks)
            known = np.array(sorted({self.vocab[t] for t in distinct if t in self.vocab}), np.int64)
            terms.append(known)
            bounds[j] = self.term_max[known].sum() + (len(distinct) - len(known)) * self.unseen_term_weight
        return terms, bounds

    def bounds(self, queries: list[str]) -> np.ndarray:
        return self.analyze(queries)[1]

    def query_terms(self, queries: list[str]) -> list[np.ndarray]:
        return self.analyze(queries)[0]

    def scores(self, queries: list[str], terms: Optional[list[np.ndarray]] = None):
        """Sparse batch product: (query_ids, chunk_nos, scores), grouped by query. `terms`:
        the queries' term ids when the caller has analysed them already."""
        qt = self.query_terms(queries) if terms is None else terms
        qid = np.repeat(np.arange(len(qt)), [len(t) for t in qt])
        terms = np.concatenate(qt) if qt else np.zeros(0, np.int64)
        starts, lens = self.term_ptr[terms], self.term_ptr[terms + 1] - self.term_ptr[terms]
        # gather every posting of every (query, term) pair in one go
        offs = np.repeat(starts - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
        keys = np.repeat(qid, lens) * self.n + self.post_doc[offs]
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.bincount(inv, weights=self.post_w[offs], minlength=len(uniq))
        return uniq // self.n, uniq % self.n, sums

    def search(self, queries: list[str], top_n: int, allowed: Optional[np.ndarray] = None,
               terms: Optional[list[np.ndarray]] = None):
        q_of, docs_all, s_all = self.scores(queries, terms)
        bounds = np.searchsorted(q_of, np.arange(len(queries) + 1))
        out_s = np.full((len(queries), top_n), -np.inf, np.float32)
        out_i = np.full((len(queries), top_n), -1, np.int64)
        for j in range(len(queries)):
            docs, s = docs_all[bounds[j]:bounds[j + 1]], s_all[bounds[j]:bounds[j + 1]]
            mask = _row_mask(allowed, slice(j, j + 1))
            if mask is not None:  # filtered rows never take a slot
                keep = np.asarray(mask).reshape(-1)[docs]
                docs, s = docs[keep], s[keep]
            if len(docs) == 0:
                continue
            k = min(top_n, len(docs))
            top = np.argpartition(-s, k - 1)[:k] if k < len(docs) else np.arange(len(docs))
            top = top[np.lexsort((docs[top], -s[top]))]  # best first, ties by chunk_no
            out_s[j, :k], out_i[j, :k] = s[top], docs[top]
        return out_s, out_i


def fetch_chunks(con: duckdb.DuckDBPyConnection, chunk_nos) -> list[dict]:
    """Rows for display, in the order asked; -1 (no hit) slots are skipped."""
    wanted = [int(c) for c in np.asarray(chunk_nos).reshape(-1) if c >= 0]
    if not wanted:
        return []
    cur = con.execute("""
        SELECT chunk_no, chunk_id, doc_id, text, context, title, heading_path, page, source_uri,
               acl, metadata FROM chunks WHERE chunk_no IN (SELECT unnest(?::INTEGER[]))""",
                      [sorted(set(wanted))])
    names = [d[0] for d in cur.description]
    by_no = {r[0]: dict(zip(names, r)) for r in cur.fetchall()}
    out = []
    for c in wanted:
        row = dict(by_no[c])
        row["metadata"] = json.loads(row["metadata"]) if row["metadata"] else {}
        out.append(row)
    return out


def build_filter_mask(con_or_table: Union[duckdb.DuckDBPyConnection, pa.Table],
                      acl_groups: Optional[list[str]] = None,
                      metadata_filters: Optional[dict[str, Any]] = None) -> np.ndarray:
    """bool[n] by chunk_no. Empty/NULL acl = public; otherwise visible when it shares
    a group with acl_groups. metadata_filters: key -> value equality on the JSON
    metadata (top-level keys; values compared as JSON, so 3 != "3")."""
    order = "chunk_no"
    if isinstance(con_or_table, pa.Table):  # e.g. chunk rows read from Parquet
        con = duckdb.connect()
        con.register("chunks", con_or_table)
        if "chunk_no" not in con_or_table.column_names:
            order = "chunk_id"  # the order build_artifact numbers chunks in
    else:
        con = con_or_table
    conds, params = ["(acl IS NULL OR len(acl) = 0 OR list_has_any(acl, ?::VARCHAR[]))"], [list(acl_groups or [])]
    for key, value in sorted((metadata_filters or {}).items()):
        path = '$."' + str(key).replace('"', '\\"') + '"'
        # json() minifies both sides so formatting differences do not matter
        conds.append("coalesce(json(json_extract(metadata, ?)) = json(?), false)")
        params += [path, json.dumps(value)]
    sql = f"SELECT {' AND '.join(conds)} AS ok FROM chunks ORDER BY {order}"
    return con.execute(sql, params).fetchnumpy()["ok"].astype(bool)


class FilterMasks:
    """build_filter_mask cached by (groups, filters): most questions share a few."""

    def __init__(self, con: duckdb.DuckDBPyConnection, max_entries: int = 256):
        self.con, self.max_entries = con, max_entries
        self._cache: dict[tuple, np.ndarray] = {}

    def get(self, acl_groups: Optional[list[str]] = None,
            metadata_filters: Optional[dict[str, Any]] = None) -> Optional[np.ndarray]:
        """Always a mask (never None), so ACL'd chunks stay hidden without groups."""
        key = (tuple(sorted(set(acl_groups or []))),
               json.dumps(metadata_filters or {}, sort_keys=True, default=str))
        mask = self._cache.get(key)
        if mask is None:
            if len(self._cache) >= self.max_entries:
                self._cache.pop(next(iter(self._cache)))
            mask = build_filter_mask(self.con, list(key[0]), metadata_filters)
            mask.setflags(write=False)
            self._cache[key] = mask
        return mask


def hnsw_recall_at_k(con: duckdb.DuckDBPyConnection, query_vectors: np.ndarray, k: int = 10) -> float:
    """Mean |HNSW top-k ∩ exact top-k| / min(k, rows) over the queries (no filter on either side)."""
    q = np.atleast_2d(np.asarray(query_vectors, np.float32))
    _, exact = DenseIndex.from_artifact(con).search(q, k)
    _, approx = search_hnsw(con, q, k)
    hits = [len(set(e[e >= 0]) & set(a[a >= 0])) / max(1, int((e >= 0).sum())) for e, a in zip(exact, approx)]
    return float(np.mean(hits)) if hits else float("nan")
