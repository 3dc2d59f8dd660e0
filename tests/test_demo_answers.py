"""The demo's answers (`make run`): each sample question's answer holds its `expect` substring.

samples/questions.jsonl gives every question the substring a person would accept in its answer
(`expect`, read off samples/corpus). Indexing the whole sample corpus takes minutes on 2 cores, so
by default the documents of the questions checked here are indexed (with the distractors that
made the demo's answers bad: json's conversion tables, fnmatch's two wordings of one fact);
RAGBEAM_DEMO_FULL=1 indexes all of samples/corpus and checks every question, as `make run` answers.
"""
import json
import os

import pytest

from conftest import SAMPLES, copy_corpus
from transforms.index import publish
from transforms.ingest.embed import model_spec_from_config
from transforms.query.engine import QAEngine
from transforms.query.questions import read_questions

QUESTIONS = SAMPLES.parent / "questions.jsonl"
FULL = bool(os.environ.get("RAGBEAM_DEMO_FULL"))
SUBSET = [  # the checked questions' documents, and look-alikes that compete with them
    "python/library/json.html", "python/library/fnmatch.html", "python/library/glob.html",
    "python/library/secrets.html", "python/library/uuid.html", "man/man3/fnmatch.3",
    "man/man1/ldd.1", "man/man2/read.2", "records/faq.jsonl",
]
# Questions the answer job still gets wrong on the whole corpus, with why (not answer selection):
KNOWN_MISSES = {
    "q01": "json.dumps' own chunk is not among the top 5 retrieved; the answer is json prose",
    "q04": "NamedTemporaryFile's signature is in the chunk's heading, not its text",
    "q11": "path.basename's chunk is not among the top 5 retrieved",
    "q12": "the NAME line 'git-add - Add file contents to the index' outscores the synopsis",
    "q13": "the ascii table row of 'A' scores below the NAME line",
    "q14": "'# dpkg-reconfigure locales' scores below the prose about locales",
    "q15": "setInterval(...) is only in the chunk's heading",
}


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
        yield {q.id: (q, rec) for q, rec in zip(qs, e.answer_batch(qs, top_k=10))}
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
    for qid, (q, rec) in demo.items():
        if qid not in KNOWN_MISSES and q.metadata["expect"].lower() not in rec.answer.lower():
            wrong[qid] = (q.question, q.metadata["expect"], rec.answer)
    assert not wrong, wrong
    if FULL:  # a miss that is fixed should leave the list
        fixed = [qid for qid in KNOWN_MISSES if demo[qid][0].metadata["expect"].lower() in demo[qid][1].answer.lower()]
        assert not fixed, fixed


def test_no_table_rows_or_restatements_in_the_demo_answers(demo):
    # "How do I serialize ...": not json's Python-to-JSON conversion table
    _, rec = demo["q01"]
    assert rec.status == "answered" and "| Python | JSON |" not in rec.answer, rec.answer
    # fnmatch's page says "Test whether ... returning True or False" twice (fnmatch, fnmatchcase)
    _, rec = demo["q02"]
    assert rec.answer.count("returning True or False") == 1, rec.answer
    assert rec.answer.startswith("fnmatch.fnmatch(filename, pattern)"), rec.answer  # the call leads
