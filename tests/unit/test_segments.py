"""Segments without an index run: BM25 tokens keep codes, segment ids cover the analysis, and the
merge policy's tiers, tombstones and drops."""
from __future__ import annotations

import numpy as np
import pyarrow as pa


def test_bm25_tokens_keep_codes():
    from transforms.index.bm25 import bm25_tokens
    toks = bm25_tokens("Got ERR_CONN_4042 under ISO-27001, see v2.3.1 — Café")
    for t in ("err_conn_4042", "4042", "iso_27001", "27001", "iso", "v2_3_1", "cafe"):
        assert t in toks
    assert bm25_tokens("err-conn-4042")[-1] == bm25_tokens("ERR_CONN_4042")[-1]
    assert "the" not in bm25_tokens("the agent")


def test_segment_id_covers_the_analysis(monkeypatch):
    """A changed BM25 stopword list, content-word stopword list or stemmer gives new ids: the
    segment's terms, postings or words.arrow would differ for the same rows."""
    from transforms.common import words
    from transforms.index import bm25, segments
    rows = pa.table({c: ["x"] for c in segments.ROW_COLUMNS})
    base = segments.segment_id(rows, "ns")
    assert segments.segment_id(rows, "ns") == base
    seen = {base}
    for module, name, value in ((bm25, "BM25_STOPWORDS", bm25.BM25_STOPWORDS | {"json"}),
                                (words, "ANSWER_STOPWORDS", words.ANSWER_STOPWORDS - {"the"}),
                                (segments, "BM25_STEMMER", "none")):
        with monkeypatch.context() as m:
            m.setattr(module, name, value)
            sid = segments.segment_id(rows, "ns")
        assert sid not in seen, name
        seen.add(sid)
    assert segments.segment_id(rows, "ns") == base


def test_merge_policy_tiers_tombstones_and_drops():
    from transforms.index.segment_plan import MergePolicy, plan_segments
    pol = MergePolicy(segment_max_chunks=100, merge_factor=3, merge_floor_chunks=10, max_deleted_fraction=0.3)
    ids = lambda p, n: pa.array([f"{p}{i:04d}" for i in range(n)])  # noqa: E731
    big, s1, s2, gone = ids("a", 100), ids("b", 8), ids("c", 9), ids("d", 5)
    heavy = ids("e", 60)
    carried = pa.concat_arrays([big, s1, s2, heavy[:30]])  # d gone entirely, e loses half
    segs = {"A": big, "B": s1, "C": s2, "D": gone, "E": heavy}

    def live_of(names, carried):  # (id, rows, tombstones): the rows not carried are tombstoned
        return [(n, len(segs[n]), np.flatnonzero(~np.isin(segs[n].to_pylist(), carried.to_pylist())))
                for n in names]
    live = live_of("ABCDE", carried)
    plan = plan_segments(["fresh.parquet"], ids("f", 7), live, pol, segs.get)
    assert plan.dropped == ["D"]
    assert "A" in plan.keep and len(plan.keep["A"]) == 0  # a full segment is never merged for its size
    # B, C and the fresh rows are three of tier 0: merged; E is over the tombstone threshold: rewritten
    assert set(plan.merged) == {"B", "C", "E"}
    assert sum(i.chunks for i in plan.build) == 8 + 9 + 7 + 30
    assert all(i.chunks <= 100 for i in plan.build)
    # below the merge factor nothing merges: the fresh rows make their own segment
    plan2 = plan_segments(["fresh.parquet"], ids("f", 7), live_of("AB", pa.concat_arrays([big, s1])), pol, segs.get)
    assert plan2.merged == [] and set(plan2.keep) == {"A", "B"} and [i.chunks for i in plan2.build] == [7]
