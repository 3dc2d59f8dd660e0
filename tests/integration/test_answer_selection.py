"""The fitted answer selection through the engine on the mini index: a confidence written with
each answer and "not found" decided by it; the rules' answers carry a calibrated confidence too."""
from __future__ import annotations

import dataclasses
import json


def test_the_engine_with_the_fitted_selection_writes_a_confidence_and_decides_not_found_by_it(mini_index):
    # answer.selection: model end to end on the mini index: stored sentence vectors, records
    # carrying a confidence, the trace listing the read head, and not found below the threshold
    from configs.schema import load_config
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    cfg = load_config(environ={"RAGBEAM__ANSWER__SELECTION": "model"})
    index_dir, _ = mini_index
    e = QAEngine(publish.resolve_index(str(index_dir)), cfg, model_spec_from_config(cfg))
    try:
        qs = [Question("a", "What does error ERR_CONN_4042 mean?"), Question("b", "What is the boiling point of tea?")]
        recs = e.answer_batch(qs, top_k=10, trace=True)
        for r in recs:
            assert r.confidence is not None and 0.0 <= r.confidence <= 1.0
            assert (r.status == "answered") == (r.confidence >= cfg.evidence_threshold), (r.status, r.confidence)
            assert len(r.trace["context"]) <= cfg.answer.read_chunks
            assert {c["chunk_id"] for c in r.citations} <= {c["chunk_id"] for c in r.trace["context"]}
        assert recs[0].status == "answered" and "ERR_CONN_4042" in recs[0].answer, recs[0]
    finally:
        e.close()


def test_the_rules_answers_carry_a_calibrated_confidence(mini_index, test_config):
    # the default (answer.selection: rules): an answered record's confidence comes from the shipped
    # model's rules calibration, the same answer as without it; not found has none
    from dataclasses import replace as dc_replace
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    from transforms.query.selection import RULES_CONFIDENCE_FEATURES
    assert test_config.answer.selection == "rules" and test_config.confidence_model.rules_w is not None
    assert test_config.confidence_model.rules_w.shape == (len(RULES_CONFIDENCE_FEATURES),)
    index_dir, _ = mini_index
    e = QAEngine(publish.resolve_index(str(index_dir)), test_config, model_spec_from_config(test_config))
    try:
        qs = [Question("a", "What does error ERR_CONN_4042 mean?"), Question("b", "What is the boiling point of tea?")]
        recs = e.answer_batch(qs, top_k=10)
        e.answerer.p = dc_replace(e.answerer.p, confidence_model=None)
        plain = e.answer_batch(qs, top_k=10)
    finally:
        e.close()
    for r, p in zip(recs, plain):
        assert (r.answer, r.status) == (p.answer, p.status) and p.confidence is None
        if r.status == "answered":
            assert 0.0 <= r.confidence <= 1.0
        else:
            assert r.confidence is None
    assert recs[0].status == "answered"


def test_the_engine_turns_a_nan_evidence_and_a_nan_ranking_into_not_found(mini_index, test_config):
    """Through the answer engine: whatever produced the NaN, no record is 'answered' with it."""
    from transforms.index import publish
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    index_dir, _ = mini_index
    engine = QAEngine(publish.resolve_index(str(index_dir)), test_config, model_spec_from_config(test_config))
    try:
        qs = [Question("q1", "What does error ERR_CONN_4042 mean?")]
        (good,) = engine.answer_batch(qs, top_k=5)
        assert good.status == "answered"
        answer = engine.answer

        def nan_evidence(*a, **kw):
            out = answer(*a, **kw)
            for r in out:
                r.evidence_score = float("nan")
            return out
        engine.answer = nan_evidence
        (rec,) = engine.answer_batch(qs, top_k=5)
        assert rec.status == "not_found" and rec.citations == []
        json.dumps(rec.to_row(), allow_nan=False)
        engine.answer = answer
        candidates = engine.candidates

        def nan_scores(rankings):
            nan = float("nan")
            return [[dataclasses.replace(c, score=nan, rerank_score=nan) for c in cands]
                    for cands in candidates(rankings)]
        engine.candidates = nan_scores
        (rec,) = engine.answer_batch(qs, top_k=5)
        assert rec.status != "answered"
        json.dumps(rec.to_row(), allow_nan=False)
    finally:
        engine.close()
