"""Approximate dense search (retrieve.mode ann over a segment built with index.ann hnsw): with
efSearch at least the segment's rows it finds what exact search finds, filters and tombstones are
applied inside it (no hidden row ever comes back, at any efSearch), a very selective filter is
searched exactly, the graph's settings are part of the segment id, and a damaged graph file is
refused like any damaged segment file."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from tests.unit.test_batched_search import ACCESS, DEAD, DIM, N, _analyse, _corpus

SPEC = dict(m=16, ef_construction=200)


def _part(rows, vecs, lo=0, hi=N):
    from transforms.index.segments import SegmentRows
    m = hi - lo
    return SegmentRows(rows.slice(lo, m), vecs[lo:hi], np.zeros(m + 1, np.int64), np.zeros(0, np.int32),
                       np.zeros(0, np.int32), np.zeros((0, DIM), np.int8), np.zeros(m, bool))


@pytest.fixture(scope="module")
def seg(tmp_path_factory):
    """One segment of the batched-search corpus with its HNSW graph, and the corpus."""
    from transforms.index.segments import AnnSpec, Segment, write_segment
    rows, vecs, questions, qv = _corpus()
    root = tmp_path_factory.mktemp("ann")
    meta = write_segment(_part(rows, vecs), str(root), "test", ann=AnnSpec(**SPEC))
    return Segment(str(root / meta["id"])), (rows, vecs, questions, qv)


def _searcher(s, ef=None):
    from transforms.query.segment_search import SegmentSearcher
    terms = s.terms().column("term").to_pylist()
    ptr, doc = np.asarray(s.post_ptr), np.asarray(s.post_doc)
    alive = np.ones(s.n, bool)
    alive[DEAD] = False
    df = np.array([int(alive[doc[ptr[i]:ptr[i + 1]]].sum()) for i in range(len(terms))])
    live = int(alive.sum())
    return SegmentSearcher(s, 0, df, DEAD, live, float(np.asarray(s.doc_len)[alive].sum()) / live,
                           ann_ef_search=ef)


def _lists(hits):
    return [(h.dense_no.tolist(), h.dense_cos.tolist(), h.bm25_no.tolist(), h.bm25_score.tolist(),
             h.cand_no.tolist(), h.cand_cos.tolist(), h.cand_bm25.tolist()) for h in hits]


def test_segment_meta_records_the_graph_and_its_sha256(seg):
    s, _ = seg
    assert s.has_ann() and s.meta["ann"]["fingerprint"] == "hnsw-v1:m16:efc200"
    assert "hnsw.faiss" in s.meta["files"]
    g = s.ann_index()
    assert g.ntotal == N and g.d == DIM


@pytest.mark.parametrize("filtered", [False, True])
def test_ann_with_ef_at_least_the_rows_equals_exact(seg, filtered):
    """Search (dense and BM25 lists, candidates, both scores) through the graph with efSearch >= n
    equals exact search, with access rules, metadata filters and tombstones."""
    s, (_, _, questions, qv) = seg
    terms, words = _analyse(questions)
    access = [ACCESS[j % len(ACCESS)] for j in range(len(questions))] if filtered else None
    exact = _searcher(s).search(terms, words, qv, 5, 7, access=access)
    ann_searcher = _searcher(s, ef=N)
    assert ann_searcher.ann_ef_search == N
    ann = ann_searcher.search(terms, words, qv, 5, 7, access=access)
    assert _lists(ann) == _lists(exact)


@pytest.mark.parametrize("ef", [1, 8, 64])
def test_filtered_and_deleted_rows_never_come_back(seg, ef):
    """At any efSearch, every dense row the graph returns is one the question may see and live."""
    s, (_, _, questions, qv) = seg
    terms, words = _analyse(questions)
    sr = _searcher(s, ef=ef)
    for groups, filters in ACCESS:
        allowed = sr.mask(groups, filters)
        assert not allowed[DEAD].any()
        rows = sr.dense_top(qv, 13, allowed)
        got = rows[rows >= 0]
        assert len(got) and allowed[got].all()
        hits = sr.search(terms, words, qv, 5, 7, access=[(groups, filters)] * len(qv))
        for h in hits:
            assert allowed[h.dense_no].all() and allowed[h.cand_no].all()
    # per-question masks (evaluation's `allowed`): each question keeps to its own
    rng = np.random.default_rng(1)
    masks = rng.random((len(qv), N)) < 0.5
    rows = sr.dense_ann(np.asarray(qv, np.float32), 9, masks & sr.live)
    for j in range(len(qv)):
        r = rows[j][rows[j] >= 0]
        assert (masks[j] & sr.live)[r].all()


def test_a_selective_filter_is_searched_exactly(seg, monkeypatch):
    """Below ANN_EXACT_BELOW of the rows allowed, the allowed rows are searched by the exact product
    (the graph is never asked): the top k equals the exact one."""
    from transforms.query import segment_search
    s, (_, _, _, qv) = seg
    sr = _searcher(s, ef=4)
    allowed = np.zeros(N, bool)
    allowed[::40] = True
    allowed &= sr.live
    assert allowed.sum() < segment_search.ANN_EXACT_BELOW * N
    monkeypatch.setattr(type(sr), "ann_graph", lambda self: pytest.fail("graph searched"))
    got = sr.dense_ann(np.asarray(qv, np.float32), 6, allowed)
    vec = np.asarray(s.vectors, np.float64)
    for j in range(len(qv)):
        nos = np.flatnonzero(allowed)
        cos = vec[nos] @ qv[j].astype(np.float64)
        assert set(got[j].tolist()) == set(nos[np.argsort(-cos, kind="stable")[:6]].tolist())
    none = sr.dense_ann(np.asarray(qv, np.float32), 6, np.zeros(N, bool))
    assert (none == -1).all()


def test_exact_mode_and_graphless_segments_ignore_ann(tmp_path):
    """A segment built without a graph is searched exactly whatever efSearch says."""
    from transforms.index.segments import Segment, write_segment
    rows, vecs, _, _ = _corpus()
    meta = write_segment(_part(rows, vecs, 0, 300), str(tmp_path), "test")
    s = Segment(str(tmp_path / meta["id"]))
    assert not s.has_ann() and s.ann_index() is None and "ann" not in meta
    from transforms.query.segment_search import SegmentSearcher
    assert SegmentSearcher(s, 0, np.ones(10), np.zeros(0, np.int64), 300, 10.0, ann_ef_search=64).ann_ef_search is None


def test_graph_settings_are_part_of_the_segment_id():
    from transforms.index.segments import (ROW_COLUMNS, SEGMENT_FORMAT, AnnSpec, analysis_fingerprint,
                                           segment_id)
    rows, _, _, _ = _corpus()
    rows = rows.slice(0, 50)
    plain = segment_id(rows, "ns")
    ids = {plain, segment_id(rows, "ns", AnnSpec(16, 200)), segment_id(rows, "ns", AnnSpec(32, 200)),
           segment_id(rows, "ns", AnnSpec(16, 80))}
    assert len(ids) == 4
    assert segment_id(rows, "ns", AnnSpec(16, 200)) == segment_id(rows, "ns", AnnSpec(16, 200))
    # a segment without a graph keeps the id it had before graphs existed
    h = hashlib.sha256(f"{SEGMENT_FORMAT}|ns|{analysis_fingerprint()}\n".encode())
    for values in zip(*[rows.column(c).to_pylist() for c in ROW_COLUMNS]):
        h.update(json.dumps(values, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    assert plain == h.hexdigest()[:32]


def test_the_same_rows_give_the_same_graph_bytes(seg, tmp_path):
    from transforms.index.segments import AnnSpec, write_segment
    s, (rows, vecs, _, _) = seg
    meta = write_segment(_part(rows, vecs), str(tmp_path), "test", ann=AnnSpec(**SPEC))
    assert meta["id"] == s.id and meta["files"]["hnsw.faiss"] == s.meta["files"]["hnsw.faiss"]


def test_a_damaged_graph_is_refused(seg, tmp_path):
    import shutil
    from transforms.index.segments import Segment, SegmentCorrupt, check_segment
    s, _ = seg
    d = tmp_path / s.id
    shutil.copytree(s.dir, d)
    path = d / "hnsw.faiss"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SegmentCorrupt, match=r"hnsw\.faiss .*does not match the sha256"):
        check_segment(str(d), full=True)
    path.write_bytes(b"not a faiss index")  # unreadable even where nothing checked the sha256s first
    with pytest.raises(SegmentCorrupt, match=r"hnsw\.faiss unreadable"):
        Segment(str(d)).ann_index()
    os.remove(path)
    with pytest.raises(SegmentCorrupt, match=r"hnsw\.faiss is missing"):
        check_segment(str(d), full=True)
