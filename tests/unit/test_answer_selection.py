"""The fitted answer selection (transforms/query/selection.py): a page first, then its sentences,
navigation never answering, and a calibrated confidence deciding "not found"."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from transforms.query.extract import SentenceAnswerer, SentenceParams
from transforms.query.records import Candidate
from transforms.query.selection import (CONFIDENCE_FEATURES, PAGE_FEATURES, SENTENCE_FEATURES, AnswerModel,
                                        default_model)


@pytest.fixture(scope="module")
def embedder():
    from transforms.ingest.embed import Embedder, default_model_spec
    return Embedder(default_model_spec())


def cand(i, doc, text, rank, title="", heading=(), cos=0.5, cover=0.5):
    return Candidate(chunk_no=None, chunk_id=f"c{i}", doc_id=doc, text=text, context=title, title=title,
                     heading_path=list(heading), source_uri=f"docs/{doc}.html", score=1.0 / (60 + rank), rank=rank,
                     dense_cosine=cos, bm25_coverage=cover)


def answerer(embedder, **kw):
    m = default_model()
    return SentenceAnswerer(embedder, None, SentenceParams(max_sentences=3, threshold=kw.pop("threshold", -1.0),
                                                           answer_model=kw.pop("model", m), **kw))


def test_the_shipped_model_is_complete_and_its_calibration_is_monotone():
    m = default_model()
    assert m.page_w.shape == (len(PAGE_FEATURES),) and m.sent_w.shape == (len(SENTENCE_FEATURES),)
    assert m.conf_w.shape == (len(CONFIDENCE_FEATURES),)
    assert np.all(np.diff(m.calib_x) >= 0) and np.all(np.diff(m.calib_y) >= 0)
    assert 0.0 <= m.calib_y.min() and m.calib_y.max() <= 1.0
    assert 0.0 < m.threshold < 1.0
    assert m.fitted_on and all(v["tune_questions"] > 0 for v in m.fitted_on.values())
    assert set(m.compose) == {"sentence_ratio", "split_ratio", "word_budget"}


def test_a_model_fitted_on_other_features_is_refused(tmp_path):
    import json
    from transforms.query.selection import MODEL_FILE
    d = json.load(open(MODEL_FILE))
    d["page"]["features"] = d["page"]["features"][:-1]
    p = tmp_path / "m.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="refit"):
        AnswerModel.load(str(p))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-5, 5), min_size=len(CONFIDENCE_FEATURES), max_size=len(CONFIDENCE_FEATURES)))
def test_confidence_is_a_probability_for_any_features(x):
    c = default_model().confidence(np.array(x))
    assert c.shape == (1,) and 0.0 <= c[0] <= 1.0


COPY = [
    cand(1, "faq", "See How do I copy an object?", 1, "Programming FAQ", ["How do I copy an object?"], cos=0.8),
    cand(2, "contents", "copy — Shallow and deep copy operations ..... 8.10\nshutil — High-level file operations ..... 11.10",
         2, "Contents", ["Library contents"], cos=0.6),
    cand(3, "copy", "copy.copy(x)\nReturn a shallow copy of x. copy.deepcopy(x[, memo])\nReturn a deep copy of x.",
         3, "copy — Shallow and deep copy operations", ["Interface summary"], cos=0.6),
    cand(4, "copy", "Assignment statements in Python do not copy objects, they create bindings between a target "
                    "and an object.", 4, "copy — Shallow and deep copy operations", [], cos=0.55),
]


def test_navigation_cross_references_and_contents_never_answer(embedder):
    a = answerer(embedder)
    r = a.answer(["How do I copy an object?"], [COPY])[0]
    assert r.status == "answered"
    assert "See How do I" not in r.answer and "....." not in r.answer
    assert {c["doc_id"] for c in r.citations} == {"copy"}
    # a page that holds nothing but navigation is never the chosen page
    sc = a.fitted_scores("How do I copy an object?", a.embedder.encode_queries(["How do I copy an object?"])[0],
                         COPY, None)
    assert sc.docs[sc.best_page] == "copy"
    assert sc.page_p[sc.docs.index("faq")] == 0.0 and sc.page_p[sc.docs.index("contents")] == 0.0


def test_the_answer_comes_from_the_chosen_page_and_a_second_only_when_the_evidence_is_split(embedder):
    a = answerer(embedder)
    qs = ["How do I copy an object?", "What does a deep copy return?", "How are bindings created?"]
    cands = [COPY[2:] + [cand(5, "other", "A deep copy constructs a new compound object.", 5, "Glossary", cos=0.5)]] * 3
    for q, c, r in zip(qs, cands, a.answer(qs, cands)):
        sc = a.fitted_scores(q, a.embedder.encode_queries([q])[0], c, None)
        cited = [x["doc_id"] for x in r.citations]
        assert cited[0] == sc.docs[sc.best_page]
        if len(set(cited)) > 1:
            second = max((p for p in range(len(sc.docs)) if p != sc.best_page), key=lambda p: sc.page_p[p])
            assert sc.page_p[second] >= a.p.answer_model.compose["split_ratio"] * sc.page_p[sc.best_page]


def test_the_confidence_decides_not_found_and_is_recorded(embedder):
    q = ["How do I copy an object?"]
    sure = answerer(embedder).answer(q, [COPY])[0]
    assert sure.status == "answered" and 0.0 <= sure.confidence <= 1.0
    refused = answerer(embedder, threshold=sure.confidence + 1e-6).answer(q, [COPY])[0]
    assert refused.status == "not_found" and refused.confidence == pytest.approx(sure.confidence)


def test_a_non_finite_score_is_never_answered(embedder):
    m = default_model()
    bad = replace(m, conf_w=np.full_like(m.conf_w, np.nan))
    r = answerer(embedder, model=bad).answer(["How do I copy an object?"], [COPY])[0]
    assert r.status == "not_found"


def test_a_definitions_term_leads_its_description(embedder):
    a = answerer(embedder)
    r = a.answer(["How do I make a deep copy of an object?"], [COPY[2:]])[0]
    assert r.answer.startswith("copy.deepcopy(x[, memo])") or r.answer.startswith("copy.copy(x)")


def test_a_listwise_model_leads_with_the_best_sentence_and_page_score_among_those_that_may_answer(embedder):
    m = replace(default_model(), sent_kind="listwise", page_weight=1.0)
    a = answerer(embedder, model=m)
    q = "How do I copy an object?"
    sc = a.fitted_scores(q, a.embedder.encode_queries([q])[0], COPY, None)
    ok = sc.can_answer & (sc.page_p[sc.page_of] > 0)
    z = sc.sent_x @ m.sent_w + np.log(np.maximum(sc.page_p[sc.page_of], 1e-9))
    assert sc.lead == int(np.flatnonzero(ok)[np.argmax(z[ok])])
    assert sc.best_page == sc.page_of[sc.lead]
    assert sc.sent_p[~ok].sum() == 0.0 and sc.sent_p.sum() == pytest.approx(1.0)
    # no page evidence: the sentence scores alone choose
    flat = replace(m, page_weight=0.0)
    sc0 = answerer(embedder, model=flat).fitted_scores(q, a.embedder.encode_queries([q])[0], COPY, None)
    z0 = sc0.sent_x @ m.sent_w
    assert sc0.lead == int(np.flatnonzero(ok)[np.argmax(z0[ok])])


def test_confidence_features_are_crossed_with_the_chosen_pages_structure(embedder):
    # a page whose chunks carry headings (HTML, man pages) gets its features a second time, and
    # the structure flag; a flat record (JSONL, text) gets zeros there: fitted apart, measured
    from transforms.query.selection import is_structured, rules_features
    a = answerer(embedder)
    q = "How do I copy a file?"
    qv = embedder.encode_queries([q])[0]
    text = "shutil.copy(src, dst) copies the file src to the file or directory dst."
    n = len(CONFIDENCE_FEATURES) // 2
    for heading, flag in ((("shutil", "Directory and files operations"), 1.0), ((), 0.0)):
        sc = a.fitted_scores(q, qv, [cand(0, "d", text, 1, title="shutil", heading=heading)], None)
        assert sc.conf_x[-1] == flag
        assert np.array_equal(sc.conf_x[n:2 * n], sc.conf_x[:n] * flag)
    flat, headed = cand(0, "d", text, 1), cand(1, "d", text, 2, heading=("shutil",))
    assert is_structured([flat]) == 0.0 and is_structured([flat, headed]) == 1.0
    x = rules_features("call", 0.8, [{"doc_id": "d"}], [flat, headed], {"d": 0.5}, ("prose", False, False, True, 2.0))
    assert x[-1] == 1.0 and len(x) == len(default_model().rules_w)


def test_rules_with_a_page_first_pick_sentences_from_the_page_the_model_chooses(embedder):
    # the rules read the head of the list (top_chunks); with page_first the fitted model first
    # chooses a page from all of the read list's chunks and the rules answer from that page's chunks
    q = "How do I copy an object?"
    glossary = cand(0, "glossary", "Objects are Python's abstraction for data.", 1, "Data model", ["Objects"],
                    cos=0.45, cover=0.2)
    read = [glossary] + [replace(c, rank=c.rank + 1) for c in COPY[1:]]

    def rules(page_first):
        return SentenceAnswerer(embedder, None, SentenceParams(
            max_sentences=2, threshold=-1.0, top_chunks=2, read_chunks=20, call_chunks=0,
            confidence_model=default_model(), page_first=page_first))
    qv = embedder.encode_queries([q])[0]
    sc = rules(True).fitted_scores(q, qv, read, None, model=default_model())
    assert sc.docs[sc.best_page] == "copy"  # beyond the rules' head of two chunks
    plain, first = rules(False).answer([q], [read])[0], rules(True).answer([q], [read])[0]
    assert {c["doc_id"] for c in plain.citations} == {"glossary"}
    assert first.status == "answered" and {c["doc_id"] for c in first.citations} == {"copy"}
    # "not found" is still decided by the head's evidence: the same as without the page first
    assert first.evidence_score == pytest.approx(plain.evidence_score)
