"""The demo's answers (`make run`): each sample question's answer holds its `expect` substring.

samples/questions.jsonl gives every question the substring a person would accept in its answer
(`expect`, read off samples/corpus). Indexing the whole sample corpus takes minutes on 2 cores, so
by default only the documents of a few questions are indexed (fnmatch's page, which says one
fact twice, among them);
RAGBEAM_DEMO_FULL=1 indexes all of samples/corpus and checks every question, as `make run` answers.
"""
import json
import os

import pytest

from conftest import SAMPLES, copy_corpus
from transforms.index import publish
from transforms.ingest.embed import model_spec_from_config
from transforms.query.engine import QAEngine
from transforms.query.questions.read import read_questions

QUESTIONS = SAMPLES.parent / "questions.jsonl"
FULL = bool(os.environ.get("RAGBEAM_DEMO_FULL"))
# the checked questions' documents: a restatement and a call to lead with (fnmatch), a call
# (secrets), an option term that is no answer to "what does ldd print" (ldd), prose (faq), a
# table row under its header (ascii: "What is the octal code of ... A?"), a description whose
# late-chunked vector holds its section's platform notes (path: basename against extname);
# json's conversion table is test_answer_job's, on the mini index
SUBSET = ["python/library/fnmatch.html", "python/library/secrets.html", "man/man1/ldd.1", "records/faq.jsonl",
          "man/man7/ascii.7", "nodejs/api/path.md"]
# Questions the demo still answers without `expect` (measured on the whole sample corpus), with the reason
KNOWN_MISSES: dict[str, str] = {}


@pytest.fixture(scope="module")
def demo(test_config, tmp_path_factory):
    from pipelines.index import run_index
    corpus = SAMPLES if FULL else copy_corpus(tmp_path_factory.mktemp("demo-corpus"), SUBSET)
    index_dir = tmp_path_factory.mktemp("demo-index")
    run_index(test_config, str(corpus), str(index_dir), progress=False, log=lambda *_: None)
    qs = [q for q in read_questions(str(QUESTIONS))
          if FULL or (q.metadata or {}).get("expected_key") in SUBSET]
    e = QAEngine(publish.resolve_index(str(index_dir)), test_config, model_spec_from_config(test_config))
    try:
        answers = {q.id: (q, rec) for q, rec in zip(qs, e.answer_batch(qs, top_k=10))}
        # what q02 was answered before the restatement rule (and before call descriptions were
        # scored alone, which also keeps the second wording out: its own vector scores lower)
        e.answerer.p.restate_overlap, e.answerer.p.call_definitions_alone = 0, 0
        answers["q02-restate-off"] = e.answer_batch([answers["q02"][0]], top_k=10)[0]
        e.answerer.p.restate_overlap, e.answerer.p.call_definitions_alone = test_config.answer.restate_overlap, \
            test_config.answer.call_definitions_alone
        answers["q11-trace"] = e.answer_batch([answers["q11"][0]], top_k=30, trace=True)[0]
        yield answers
    finally:
        e.close()


def test_every_sample_question_has_an_expected_answer():
    rows = [json.loads(line) for line in QUESTIONS.read_text().splitlines() if line.strip()]
    for r in rows:
        key = r["expected_key"]
        assert (SAMPLES / key).exists() and r["expect"].strip(), r
    assert set(KNOWN_MISSES) <= {r["id"] for r in rows}


def test_demo_answers_hold_what_a_person_accepts(demo):
    wrong = {}
    for qid, (q, rec) in ((k, v) for k, v in demo.items() if isinstance(v, tuple)):
        if qid not in KNOWN_MISSES and q.metadata["expect"].lower() not in rec.answer.lower():
            wrong[qid] = (q.question, q.metadata["expect"], rec.answer)
    assert not wrong, wrong
    if FULL:  # a miss that is fixed should leave the list
        fixed = [qid for qid in KNOWN_MISSES if demo[qid][0].metadata["expect"].lower() in demo[qid][1].answer.lower()]
        assert not fixed, fixed


def test_a_restatement_is_dropped_and_the_call_leads(demo):
    # fnmatch's page says "Test whether ... returning True or False" twice (fnmatch, fnmatchcase):
    # cosine 0.90, under answer.dup_sim; the shorter one's content words are 8/9 in the other
    _, rec = demo["q02"]
    assert demo["q02-restate-off"].answer.count("returning True or False") == 2  # the rule's case
    assert rec.answer.count("returning True or False") == 1, rec.answer
    assert rec.answer.startswith("fnmatch.fnmatch(filename, pattern)"), rec.answer  # the call leads


def test_a_call_questions_trace_lists_the_further_chunks_it_read(demo, test_config):
    # path.basename's chunk ranks past the reranker's head (rerank.top_n): the answerer still read
    # it (answer.call_chunks), and the trace's context says so
    rec = demo["q11-trace"]
    cited = {c["chunk_id"] for c in rec.citations}
    ranks = [r["rank"] for r in rec.retrieved if r["chunk_id"] in cited]
    assert ranks and max(ranks) > test_config.rerank.top_n, ranks
    assert cited <= {c["chunk_id"] for c in rec.trace["context"]}
