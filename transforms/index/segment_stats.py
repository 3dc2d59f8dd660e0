"""Corpus-wide BM25 statistics of a version, over its live segments.

BM25 weighs a term by its document frequency over the whole corpus and a chunk's length by the
corpus' average, so a segment scored with its own statistics would rank unlike one index built
whole. A version therefore stores, per listed segment:

  segment_stats/<segment id>/dead.npy     int64 local rows tombstoned in this version
  segment_stats/<segment id>/df.npy       int32 df over the version's live rows, aligned with the
                                          segment's sorted vocabulary (terms.arrow)
  segment_stats/<segment id>/dead_df.npy  int64 (2, k): the terms its tombstoned rows hold and in how
                                          many of them (what the next version starts from)

and in its manifest `bm25: {num_docs, total_len, avgdl}` over live rows only. Tombstoned rows
count nowhere: a version with tombstones scores exactly like an index built from its live rows.
The work is per vocabulary term and per tombstoned row, never per live chunk: a nightly adds to
the live version's dead_df the terms of the rows tombstoned tonight, analysed again from the
segment's rows.arrow (memory-mapped: only those rows are read) with the analyzer that built it,
and scans a segment's postings only when that record is missing (versions written before it).
"""
from __future__ import annotations

import io
import os
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.common import storage
from transforms.index.bm25 import ANALYZER_VERSION, Analyzer
from transforms.index.segment_plan import df_file, tombstones_file
from transforms.index.segments import BM25_STEMMER, Segment


def dead_df(seg: Segment, dead: np.ndarray) -> np.ndarray:
    """Per term of the segment, how many of its `dead` rows hold it (from the postings)."""
    T = int(seg.meta["terms"])
    if not len(dead):
        return np.zeros(T, np.int64)
    mask = np.zeros(seg.n, bool)
    mask[dead] = True
    pos = np.flatnonzero(mask[np.asarray(seg.post_doc)])
    term = np.searchsorted(np.asarray(seg.post_ptr), pos, side="right") - 1
    return np.bincount(term, minlength=T).astype(np.int64)


def dead_df_file(version_dir: str, sid: str) -> str:
    return storage.join(version_dir, "segment_stats", sid, "dead_df.npy")


def read_dead_df(version_dir: str, sid: str, terms: int) -> Optional[np.ndarray]:
    """A version's dead_df of a segment, dense (None where the version has none)."""
    try:
        sparse = np.load(io.BytesIO(storage.read_bytes(dead_df_file(version_dir, sid))))
    except (OSError, ValueError):
        return None
    out = np.zeros(terms, np.int64)
    out[np.asarray(sparse[0], np.int64)] = sparse[1]
    return out


def rows_dead_df(seg: Segment, rows: np.ndarray, con=None) -> Optional[np.ndarray]:
    """Per term of the segment, how many of `rows` hold it, from those rows' texts analysed again as
    the build did (context + "\n" + text); None when the segment was built by another analyzer, or
    a token is not in its vocabulary (then the postings decide)."""
    if seg.meta.get("analyzer") != ANALYZER_VERSION or seg.meta.get("stemmer") != BM25_STEMMER:
        return None
    T = int(seg.meta["terms"])
    if not len(rows):
        return np.zeros(T, np.int64)
    part = seg.rows.select(["context", "text"]).take(pa.array(np.asarray(rows, np.int64)))
    texts = [c + "\n" + t for c, t in zip(pc.fill_null(part.column("context"), "").to_pylist(),
                                           pc.fill_null(part.column("text"), "").to_pylist())]
    own = con is None
    if own:
        from transforms.common.duck import connect
        con = connect(":memory:", memory_limit="256MB")
    try:
        docs = Analyzer(con, BM25_STEMMER).analyze(texts)
    finally:
        if own:
            con.close()
    flat = pa.array([w for toks in docs for w in set(toks)], pa.string())
    at = pc.index_in(flat, value_set=seg.terms().column("term"))
    if at.null_count:
        return None
    return np.bincount(np.asarray(at.to_numpy(zero_copy_only=False), np.int64), minlength=T).astype(np.int64)


def write_version_stats(version_dir: str, segments: list[tuple]) -> dict:
    """segments: (segment, its tombstoned local rows[, their dead_df when known]) per listed
    segment. Writes the per-segment files and returns the manifest's `bm25` record."""
    tables, total_len, num_docs = [], 0, 0
    dead_dfs = []
    for item in segments:
        seg, dead = item[0], item[1]
        known = item[2] if len(item) > 2 else None
        terms = seg.terms()
        dd = known if known is not None else dead_df(seg, dead)
        dead_dfs.append(dd)
        live_df = np.asarray(terms.column("df").to_numpy(), np.int64) - dd
        tables.append(pa.table({"term": terms.column("term"), "df": pa.array(live_df, pa.int64())}))
        doc_len = seg.doc_len  # memory-mapped: only the tombstoned rows are read
        whole = seg.meta.get("total_len")
        whole = int(whole) if whole is not None else int(np.asarray(doc_len).sum())
        total_len += whole - (int(np.asarray(doc_len[np.asarray(dead, np.int64)]).sum()) if len(dead) else 0)
        num_docs += seg.n - len(dead)
    segments = [(item[0], item[1]) for item in segments]
    glob = pa.concat_tables(tables).group_by("term").aggregate([("df", "sum")]) if tables else None
    for (seg, dead), terms in zip(segments, tables):
        idx = pc.index_in(terms.column("term"), value_set=glob.column("term"))
        df = np.asarray(glob.column("df_sum").take(idx).to_numpy(), np.int32)
        os.makedirs(os.path.dirname(df_file(version_dir, seg.id)), exist_ok=True)
        np.save(df_file(version_dir, seg.id), df)
        np.save(tombstones_file(version_dir, seg.id), np.asarray(dead, np.int64))
    for (seg, _), dd in zip(segments, dead_dfs):
        nz = np.flatnonzero(dd)
        np.save(dead_df_file(version_dir, seg.id), np.stack([nz, dd[nz]]).astype(np.int64))
    return {"num_docs": num_docs, "total_len": total_len,
            "avgdl": (total_len / num_docs) if num_docs else 0.0}
