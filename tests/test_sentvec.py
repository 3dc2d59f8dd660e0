"""Index-time sentence vectors (late chunking), their storage, and the answerer that uses them."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from transforms.query.answer import EXTRACTIVE_NOT_FOUND
from transforms.query.cite import check_citations
from transforms.query.extract import SentenceAnswerer, SentenceParams
from transforms.query.records import Candidate
from transforms.query.rerank import VectorCache, candidate_sentences
from transforms.ingest.sentvec import (SentenceStore, chunk_sentence_vectors, dequantize, late_encode,
                                quantize_int8, sentence_spans)

TEXTS = [
    "Path objects provide many methods for filesystem work. Path.mkdir(parents=True) creates any "
    "missing parent directories of the path. If exist_ok is true, FileExistsError is not raised.",
    "os.remove(path) removes the file path.\n\nIf the path is a directory, an OSError is raised. "
    "Use rmdir() to remove directories. ---",
    "The Nile flows north through Egypt into the Mediterranean Sea.",
]
CONTEXTS = ["pathlib › Methods", "os › Files", ""]


@pytest.fixture(scope="module")
def embedder():
    from transforms.ingest.embed import Embedder, default_model_spec
    return Embedder(default_model_spec())


def embed_texts():
    return [f"{c}\n{t}" if c else t for c, t in zip(CONTEXTS, TEXTS)]


def test_spans_are_the_candidate_sentences():
    for t in TEXTS:
        spans = sentence_spans(t)
        assert [t[s:e] for s, e in spans] == candidate_sentences(Candidate(text=t))
    assert sentence_spans("") == []
    long = " ".join(f"Sentence number {i} is here." for i in range(100))
    assert len(sentence_spans(long)) == 64


def test_late_chunk_vectors_equal_encode_and_sentences_are_pooled(embedder):
    chunk, spans, vecs = chunk_sentence_vectors(embedder, embed_texts(), TEXTS, kind="late")
    np.testing.assert_allclose(chunk, embedder.encode(embed_texts()), atol=1e-6)
    assert [len(v) for v in vecs] == [len(s) for s in spans] == [3, 3, 1]
    for v in vecs:
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    # each late sentence vector is closest to its own sentence embedded alone
    sep = embedder.encode([TEXTS[0][s:e] for s, e in spans[0]])
    assert (np.argmax(vecs[0] @ sep.T, axis=1) == np.arange(3)).all()
    # a one-sentence chunk without context: its sentence vector is nearly the chunk vector
    assert float(vecs[2][0] @ chunk[2]) > 0.95


def test_separate_kind_embeds_each_sentence(embedder):
    _, spans, vecs = chunk_sentence_vectors(embedder, embed_texts(), TEXTS, kind="separate")
    ref = embedder.encode([TEXTS[1][s:e] for s, e in spans[1]])
    np.testing.assert_allclose(vecs[1], ref, atol=1e-6)


def test_late_encode_span_past_text_falls_back_to_chunk(embedder):
    chunk, vecs = late_encode(embedder, ["short text"], [[(0, 5), (100, 120)]])
    np.testing.assert_allclose(vecs[0][1], chunk[0])


def test_int8_keeps_cosines():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(50, 384)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    q = quantize_int8(v)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    w = dequantize(q)
    assert np.abs((v @ v[0]) - (w @ w[0])).max() < 0.01


def test_store_round_trips_through_parquet(tmp_path, embedder):
    from transforms.records import SENTENCE_COLUMNS, chunk_schema
    SENTENCE_FIELDS = [chunk_schema(384).field(n) for n in SENTENCE_COLUMNS]

    _, spans, vecs = chunk_sentence_vectors(embedder, embed_texts(), TEXTS, kind="late")
    rows = {"chunk_no": [0, 1, 2, 3],
            "sentence_starts": [[s for s, _ in sp] for sp in spans] + [None],
            "sentence_ends": [[e for _, e in sp] for sp in spans] + [None],
            "sentence_vectors": [list(quantize_int8(v)) for v in vecs] + [None]}
    schema = pa.schema([("chunk_no", pa.int32())] + list(SENTENCE_FIELDS))
    pq.write_table(pa.table(rows, schema=schema), tmp_path / "c.parquet")
    t = pq.read_table(tmp_path / "c.parquet")
    st = SentenceStore.from_arrow(*(t.column(n).combine_chunks() for n in SENTENCE_COLUMNS))
    assert st.n_chunks == 4 and list(st.has_vectors) == [True, True, True, False]
    assert st.rows(3) == slice(7, 7)
    r = st.rows(1)
    assert [TEXTS[1][s:e] for s, e in zip(st.start[r], st.end[r])] == candidate_sentences(Candidate(text=TEXTS[1]))
    q = vecs[1][2]
    np.testing.assert_allclose(st.cosines(np.arange(r.start, r.stop), q), vecs[1] @ q, atol=0.01)


def cands():
    return [Candidate(chunk_no=i, chunk_id=f"c{i}", doc_id=f"d{i}", text=t, context=c,
                      title=c, source_uri=f"file:///{i}", score=1.0, rank=i + 1)
            for i, (t, c) in enumerate(zip(TEXTS, CONTEXTS))]


class Counting:
    def __init__(self, inner):
        self.inner, self.texts = inner, 0

    def encode(self, texts, batch_size=8):
        self.texts += len(texts)
        return self.inner.encode(texts)


def test_answerer_uses_stored_vectors_and_embeds_nothing(embedder):
    _, spans, vecs = chunk_sentence_vectors(embedder, embed_texts(), TEXTS, kind="late")
    store = SentenceStore.from_lists(spans, vecs)
    counting = Counting(embedder)
    qs = ["How do I create missing parent directories with pathlib?", "Who won the 1998 world cup?"]
    qv = embedder.encode(qs)
    ans = SentenceAnswerer(counting, store, SentenceParams(gap=0.0, threshold=0.5))
    found, missing = ans.answer(qs, [cands(), cands()], qvecs=qv)
    assert counting.texts == 0
    assert found.status == "answered"
    assert found.answer == "Path.mkdir(parents=True) creates any missing parent directories of the path. [1]"
    assert [c["chunk_id"] for c in found.citations] == ["c0"]
    assert check_citations(found.answer, [cands()[0]]).ok
    assert missing.status == "not_found" and missing.answer == EXTRACTIVE_NOT_FOUND


def test_evidence_model_weighs_retrieval_scores_into_a_probability(embedder):
    """Same sentences, same question: what the retrievers saw decides. Chunks far from the
    question on both fixed-scale scores make the answer "not found" even though a sentence
    matches well; the evidence is a probability either way."""
    from dataclasses import replace

    from configs.schema import Config

    _, spans, vecs = chunk_sentence_vectors(embedder, embed_texts(), TEXTS, kind="late")
    store = SentenceStore.from_lists(spans, vecs)
    q = ["How do I create missing parent directories with pathlib?"]
    qv = embedder.encode(q)
    threshold = Config().evidence_threshold  # the shipped model at its shipped threshold
    ans = SentenceAnswerer(None, store, SentenceParams(gap=0.0, threshold=threshold, evidence_model=Config().evidence_model))
    strong = [replace(c, dense_cosine=0.7, bm25_coverage=0.6) for c in cands()]
    weak = [replace(c, dense_cosine=0.05, bm25_coverage=0.0) for c in cands()]
    [yes] = ans.answer(q, [strong], qvecs=qv)
    [no] = ans.answer(q, [weak], qvecs=qv)
    assert yes.status == "answered" and threshold <= yes.evidence_score <= 1.0
    assert no.status == "not_found" and 0.0 <= no.evidence_score < threshold
    sentence_only = SentenceAnswerer(None, store, SentenceParams(gap=0.0, threshold=0.5))
    assert sentence_only.answer(q, [weak], qvecs=qv)[0].status == "answered"  # the old evidence ignores retrieval


def test_answerer_falls_back_to_embedding_without_stored_vectors(embedder):
    _, spans, vecs = chunk_sentence_vectors(embedder, embed_texts(), TEXTS, kind="late")
    store = SentenceStore.from_lists(spans, [vecs[0], None, vecs[2]])  # chunk 1 from an old index
    counting = Counting(embedder)
    ans = SentenceAnswerer(counting, store, SentenceParams(gap=0.0, threshold=0.3))
    r, = ans.answer(["What error is raised when removing a directory with os.remove?"], [cands()],
                    cache=VectorCache())
    assert counting.texts == 1 + 3  # the question, and chunk 1's three sentences
    assert r.citations[0]["chunk_id"] == "c1" and r.answer.startswith("os.remove(path)")


def test_near_duplicates_are_dropped_and_gap_limits_sentences(embedder):
    dup = "The Nile flows north through Egypt into the Mediterranean Sea."
    texts = [dup, dup + " It is long.", "Rivers flow downhill."]
    spans = [sentence_spans(t) for t in texts]
    vecs = [embedder.encode([t[s:e] for s, e in sp]) for t, sp in zip(texts, spans)]
    store = SentenceStore.from_lists(spans, vecs)
    cs = [Candidate(chunk_no=i, chunk_id=f"c{i}", doc_id=f"d{i}", text=t, rank=i + 1)
          for i, t in enumerate(texts)]
    q = "Which way does the Nile flow?"
    wide = SentenceAnswerer(None, store, SentenceParams(gap=1.0, threshold=0.0, max_sentences=3))
    r, = wide.answer([q], [cs], qvecs=embedder.encode([q]))
    assert r.answer.count("The Nile flows north") == 1  # the copy in chunk 1 is dropped
    narrow = SentenceAnswerer(None, store, SentenceParams(gap=0.0, threshold=0.0, max_sentences=3))
    r, = narrow.answer([q], [cs], qvecs=embedder.encode([q]))
    assert r.answer.count("[") == 1 and len(r.citations) == 1
