"""The batched first stage (segment_search.SegmentSearcher.search, a batch of questions at once)
ranks exactly as a brute-force search of one question at a time: the same dense and BM25 lists
(ids and order), the same scores, in 1, 3 and 7 segments, with and without access filters and
tombstones, through each internal path (bucketed dense top-k, dense and sparse BM25 sums, groups
of questions on threads)."""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

N, DIM, DENSE_N, BM25_N = 1500, 16, 5, 7
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def _corpus(seed: int = 0):
    """Rows in chunk_id order: Zipf-like words (many BM25 ties), random unit vectors with some
    exact duplicates (cosine ties), access groups and metadata on some rows."""
    rng = np.random.default_rng(seed)
    words = sorted({"".join(rng.choice(SYLLABLES, 3)) for _ in range(400)})
    p = 1.0 / (np.arange(len(words)) + 5.0)
    p /= p.sum()
    texts = [" ".join(rng.choice(words, int(rng.integers(3, 25)), p=p)) for _ in range(N)]
    vecs = rng.standard_normal((N, DIM)).astype(np.float32)
    vecs[3::10] = vecs[1::10][:len(vecs[3::10])]  # duplicated rows: exact cosine ties
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    acl = [["eng"] if i % 5 == 0 else ([] if i % 7 else ["ops"]) for i in range(N)]
    meta = [json.dumps({"format": "pdf" if i % 3 == 0 else "text"}) for i in range(N)]
    rows = pa.table({
        "chunk_id": [f"{i:08x}" for i in range(N)], "doc_id": [f"d{i // 4}" for i in range(N)],
        "text": texts, "context": [""] * N, "title": ["t"] * N,
        "heading_path": pa.array([[] for _ in range(N)], pa.list_(pa.string())),
        "page": pa.array([None] * N, pa.int32()), "source_uri": [f"/s/{i // 4}" for i in range(N)],
        "acl": pa.array(acl, pa.list_(pa.string())), "metadata": meta})
    questions = [" ".join(rng.choice(words, int(rng.integers(1, 6)), p=p)) for _ in range(24)]
    questions += [texts[3], "zzz nothing here", ""]
    qv = rng.standard_normal((len(questions), DIM)).astype(np.float32)
    qv[0] = vecs[1]  # a question on a duplicated row (1 and 3: public, live)
    return rows, vecs, questions, qv / np.linalg.norm(qv, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """{segments: [Segment]} for the corpus split into 1, 3 and 7 segments, and the corpus."""
    from transforms.index.segments import Segment, SegmentRows, write_segment
    rows, vecs, questions, qv = _corpus()
    root = tmp_path_factory.mktemp("batched")
    out = {}
    for k in (1, 3, 7):
        bounds = np.linspace(0, N, k + 1).astype(int)
        segs = []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            m = hi - lo
            part = SegmentRows(rows.slice(lo, m), vecs[lo:hi], np.zeros(m + 1, np.int64), np.zeros(0, np.int32),
                               np.zeros(0, np.int32), np.zeros((0, DIM), np.int8), np.zeros(m, bool))
            meta = write_segment(part, str(root / f"k{k}"), "test")
            segs.append(Segment(str(root / f"k{k}" / meta["id"])))
        out[k] = segs
    return out, (rows, vecs, questions, qv)


DEAD = np.arange(2, N, 11)  # tombstoned rows (global numbers)


def _searchers(segs, threads: int = 1):
    """SegmentSearchers under one version's statistics: df over every segment's live rows."""
    from transforms.query.segment_search import SegmentSearcher
    df_of: dict = {}
    total_len, live, off = 0, 0, 0
    for s in segs:
        terms = s.terms().column("term").to_pylist()
        dead = DEAD[(DEAD >= off) & (DEAD < off + s.n)] - off
        alive = np.ones(s.n, bool)
        alive[dead] = False
        ptr, doc = np.asarray(s.post_ptr), np.asarray(s.post_doc)
        for i, t in enumerate(terms):
            df_of[t] = df_of.get(t, 0) + int(alive[doc[ptr[i]:ptr[i + 1]]].sum())
        total_len += int(np.asarray(s.doc_len)[alive].sum())
        live += int(alive.sum())
        off += s.n
    out, off = [], 0
    for s in segs:
        terms = s.terms().column("term").to_pylist()
        dead = DEAD[(DEAD >= off) & (DEAD < off + s.n)] - off
        out.append(SegmentSearcher(s, off, np.array([df_of[t] for t in terms]), dead, live, total_len / live,
                                   threads=threads))
        off += s.n
    return out, live


def _analyse(questions):
    from transforms.common.duck import connect
    from transforms.common.words import content_words
    from transforms.index.bm25 import Analyzer
    from transforms.index.segments import BM25_STEMMER
    con = connect(":memory:")
    try:
        terms = [sorted(set(t)) for t in Analyzer(con, BM25_STEMMER).analyze(questions)]
    finally:
        con.close()
    return terms, [content_words(q) for q in questions]


def _brute_force(searchers, q, terms, allowed, k1=1.2, b=0.75):
    """One question over every row: float64 cosines and BM25 (float32 weights as stored, summed
    in term order), each list ranked by (-score, chunk number)."""
    cos, bm = [], []
    for s in searchers:
        cos.append((np.asarray(s.vectors, np.float64) * q.astype(np.float64)).sum(axis=1))
        vocab = {t: i for i, t in enumerate(s.seg.terms().column("term").to_pylist())}
        ptr, doc, tf = np.asarray(s.seg.post_ptr), np.asarray(s.seg.post_doc), np.asarray(s.seg.post_tf)
        dl = np.asarray(s.seg.doc_len, np.float64)
        score = np.zeros(s.n)
        for t in sorted(terms):
            if t not in vocab:
                continue
            i = vocab[t]
            d, f = doc[ptr[i]:ptr[i + 1]], tf[ptr[i]:ptr[i + 1]].astype(np.float64)
            w = (s._idf[i] * f * (k1 + 1) / (f + s._norm[d])).astype(np.float32)
            w[~s.live[d]] = 0
            score[d] += w.astype(np.float64)
        bm.append(score)
    cos, bm = np.concatenate(cos), np.concatenate(bm)
    nos = np.flatnonzero(allowed)
    d = nos[np.lexsort((nos, -cos[nos]))][:DENSE_N]
    hit = nos[bm[nos] > 0]
    bn = hit[np.lexsort((hit, -bm[hit]))][:BM25_N]
    return d, cos, bn, bm


ACCESS = [(None, None), (["eng"], None), (None, {"format": "text"}), (["ops", "eng"], {"format": "pdf"})]


@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("filtered", [False, True])
@pytest.mark.parametrize("path", ["default", "buckets+dense_sums", "sparse_sums", "threads"])
def test_batched_search_equals_brute_force_one_question_at_a_time(built, monkeypatch, k, filtered, path):
    from transforms.query import retrieve, segment_search
    from transforms.query.segment_search import gather
    if path == "buckets+dense_sums":  # the bucketed top-k even on small segments; every BM25 sum dense
        monkeypatch.setattr(retrieve, "STRIPES", 2)
        monkeypatch.setattr(segment_search, "SPARSE_FRACTION", 10 ** 9)
    elif path == "sparse_sums":
        monkeypatch.setattr(segment_search, "SPARSE_FRACTION", 0)
    elif path == "threads":  # questions in groups of 2 or more, searched side by side
        monkeypatch.setattr(segment_search, "MIN_GROUP", 2)
    segs, (rows, _, questions, qv) = built
    searchers, live = _searchers(segs[k], threads=3 if path == "threads" else 1)
    terms, words = _analyse(questions)
    access = [ACCESS[j % len(ACCESS)] if filtered else (None, None) for j in range(len(questions))]
    whole = {(tuple(a or []), json.dumps(f)): np.concatenate([s.mask(a, f) for s in searchers]) for a, f in access}

    def run(js):
        per = [s.search([terms[j] for j in js], [words[j] for j in js], qv[js], DENSE_N, BM25_N,
                        access=[access[j] for j in js]) for s in searchers]
        return [gather([h[i] for h in per], terms[j], DENSE_N, BM25_N, live) for i, j in enumerate(js)]
    batched = run(list(range(len(questions))))
    for j, g in enumerate(batched):
        one = run([j])[0]
        a, f = access[j]
        allowed = whole[(tuple(a or []), json.dumps(f))]
        d, cos, bn, bm = _brute_force(searchers, qv[j], terms[j], allowed)
        assert [c for c, _ in g.dense] == d.tolist() == [c for c, _ in one.dense]
        assert [c for c, _ in g.bm25] == bn.tolist() == [c for c, _ in one.bm25]
        np.testing.assert_allclose([s for _, s in g.dense], cos[d], rtol=0, atol=1e-12)
        np.testing.assert_allclose([s for _, s in g.bm25], bm[bn], rtol=0, atol=1e-12)
        assert g.cos_of == one.cos_of and g.bm25_of == one.bm25_of and g.bm25_bound == one.bm25_bound
        for c, v in g.cos_of.items():
            assert v == pytest.approx(cos[c], abs=1e-12) and g.bm25_of[c] == pytest.approx(bm[c], abs=1e-12)
        assert all(allowed[c] for c in g.cos_of)  # filters and tombstones apply inside the search
        assert g.word_df == one.word_df


@pytest.mark.parametrize("long_term,block", [(4096, 1 << 22), (1, 1 << 22), (5, 50)])
def test_term_weights_do_not_depend_on_which_terms_a_batch_weighs(built, monkeypatch, long_term, block):
    """Weights are computed per term on first use (rare terms gathered, frequent ones as slices,
    in blocks); weighing them in parts gives the same bytes as weighing them all at once."""
    from transforms.query import segment_search
    segs, _ = built
    (a,), _ = _searchers(segs[1])
    (b,), _ = _searchers(segs[1])
    monkeypatch.setattr(segment_search, "_LONG_TERM", long_term)
    monkeypatch.setattr(segment_search, "_POST_BLOCK", block)
    rng = np.random.default_rng(1)
    n_terms = len(a.post_ptr) - 1
    for part in np.array_split(rng.permutation(n_terms), 5):
        a.weigh(part)
    monkeypatch.undo()
    b.weigh(np.arange(n_terms))
    assert a.post_w.tobytes() == b.post_w.tobytes()
    assert a.term_max.tobytes() == b.term_max.tobytes()
