"""Corpus-wide BM25 statistics of a version, over its live segments.

BM25 weighs a term by its document frequency over the whole corpus and a chunk's length by the
corpus' average, so a segment scored with its own statistics would rank unlike one index built
whole. A version therefore stores, per listed segment:

  segment_stats/<segment id>/dead.npy   int64 local rows tombstoned in this version
  segment_stats/<segment id>/df.npy     int32 df over the version's live rows, aligned with the
                                        segment's sorted vocabulary (terms.arrow)

and in its manifest `bm25: {num_docs, total_len, avgdl}` over live rows only. Tombstoned rows
count nowhere: a version with tombstones scores exactly like an index built from its live rows.
The work is per vocabulary term and per tombstoned posting, never per live chunk.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from transforms.index.segment_plan import df_file, tombstones_file
from transforms.index.segments import Segment


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


def write_version_stats(version_dir: str, segments: list[tuple[Segment, np.ndarray]]) -> dict:
    """segments: (segment, its tombstoned local rows) per listed segment. Writes the per-segment
    files and returns the manifest's `bm25` record."""
    tables, total_len, num_docs = [], 0, 0
    for seg, dead in segments:
        terms = seg.terms()
        live_df = np.asarray(terms.column("df").to_numpy(), np.int64) - dead_df(seg, dead)
        tables.append(pa.table({"term": terms.column("term"), "df": pa.array(live_df, pa.int64())}))
        doc_len = np.asarray(seg.doc_len)
        total_len += int(doc_len.sum()) - int(doc_len[dead].sum() if len(dead) else 0)
        num_docs += seg.n - len(dead)
    glob = pa.concat_tables(tables).group_by("term").aggregate([("df", "sum")]) if tables else None
    for (seg, dead), terms in zip(segments, tables):
        idx = pc.index_in(terms.column("term"), value_set=glob.column("term"))
        df = np.asarray(glob.column("df_sum").take(idx).to_numpy(), np.int32)
        os.makedirs(os.path.dirname(df_file(version_dir, seg.id)), exist_ok=True)
        np.save(df_file(version_dir, seg.id), df)
        np.save(tombstones_file(version_dir, seg.id), np.asarray(dead, np.int64))
    return {"num_docs": num_docs, "total_len": total_len,
            "avgdl": (total_len / num_docs) if num_docs else 0.0}
