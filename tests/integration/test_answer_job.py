"""The answer job on the mini index: right documents, checked citations, errors kept, resumable."""
import csv
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.answer import run_answer
from transforms.index import publish
from transforms.ingest.embed import model_spec_from_config
from transforms.query.engine import IndexMismatchError, QAEngine
from transforms.query.records import Question
from tests.conftest import HOSTILE, ROOT

KNOWN = [  # question -> the key (path under the corpus root) that answers it
    ("How do I find pathnames matching a Unix shell pattern in Python?", "python/library/glob.html"),
    ("How do I serialize a Python object to a JSON formatted string?", "python/library/json.html"),
    ("Which C function matches a filename against a wildcard pattern?", "man/man3/fnmatch.3"),
    ("How do I convert a Unicode domain name to Punycode in Node.js?", "nodejs/api/punycode.md"),
    ("What does error ERR_CONN_4042 mean?", "records/faq.jsonl"),
    ("Are we ISO-27001 certified?", "records/faq.jsonl"),
]


@pytest.fixture(scope="module")
def engine(mini_index, test_config):
    index_dir, _ = mini_index
    e = QAEngine(publish.resolve_index(str(index_dir)), test_config, model_spec_from_config(test_config))
    yield e
    e.close()


def keys_of(engine, cands):
    con = engine.con
    by_doc = dict(con.execute("SELECT DISTINCT doc_id, metadata->>'key' FROM chunks").fetchall())
    return [by_doc[c["doc_id"]] for c in cands]


def test_known_questions_find_their_document_in_the_top_3(engine):
    qs = [Question(f"q{i}", q) for i, (q, _) in enumerate(KNOWN)]
    recs = engine.answer_batch(qs, top_k=10)
    for (q, key), rec in zip(KNOWN, recs):
        top3 = {r["source"].split("/corpus/", 1)[-1] for r in rec.retrieved[:3]}
        assert any(t.endswith(key) for t in top3), (q, top3)
        assert rec.status == "answered", (q, rec)


def test_citations_point_at_sources_that_contain_their_quotes(engine):
    recs = engine.answer_batch([Question("q", KNOWN[4][0])], top_k=10)
    (rec,) = recs
    assert "[1]" in rec.answer and rec.citations
    texts = dict(engine.con.execute("SELECT chunk_id, text FROM chunks").fetchall())
    for c in rec.citations:
        assert c["quote"] and " ".join(c["quote"].split()) in " ".join(texts[c["chunk_id"]].split())
    assert "4 seconds" in rec.answer


def test_a_how_question_is_not_answered_with_a_table(engine):
    # the demo's "How do I serialize ...": json's Python-to-JSON conversion table shares every
    # word of the question; a table answers only questions that ask for a value (answer.form_filter)
    q = [Question("q", KNOWN[1][0])]
    p = engine.answerer.p
    rules = (p.form_filter, p.call_lexical, p.call_chunks)
    try:  # the selection before issue #23's rules
        p.form_filter, p.call_lexical, p.call_chunks = False, False, 0
        (before,) = engine.answer_batch(q, top_k=10)
    finally:
        p.form_filter, p.call_lexical, p.call_chunks = rules
    (rec,) = engine.answer_batch(q, top_k=10)
    assert "| Python | JSON |" in before.answer  # what the rule is for, on this index
    assert rec.status == "answered" and "|---|" not in rec.answer, rec.answer
    # a call question reads the definitions after the top chunks (answer.call_chunks) and counts
    # abbreviations (str: string, obj: object; answer.call_lexical): json.dumps' term leads
    assert rec.answer.startswith("json.dumps("), rec.answer


def test_acl_is_applied_inside_the_search(engine):
    staff_q = "Who can read incident post-mortems?"
    (public,) = engine.answer_batch([Question("a", staff_q)], top_k=50)
    (staff,) = engine.answer_batch([Question("b", staff_q, acl=["staff"])], top_k=50)
    acl = dict(engine.con.execute("SELECT chunk_id, acl FROM chunks").fetchall())
    assert all(not acl[r["chunk_id"]] for r in public.retrieved)
    assert any(acl[r["chunk_id"]] for r in staff.retrieved[:3])
    assert len(public.retrieved) == engine.cfg.retrieve.fused_top_n  # a filter does not cost results


def test_model_mismatch_is_refused(mini_index, test_config):
    import dataclasses
    index_dir, _ = mini_index
    spec = dataclasses.replace(model_spec_from_config(test_config), model_id="another-model")
    with pytest.raises(IndexMismatchError, match="re-index"):
        QAEngine(publish.resolve_index(str(index_dir)), test_config, spec)


def write_questions(path, fmt):
    rows = [{"id": f"q{i}", "question": q} for i, (q, _) in enumerate(KNOWN)]
    if fmt == "jsonl":
        lines = [json.dumps(r) for r in rows] + ["{not json", json.dumps({"question": "no id"}),
                                                 json.dumps({"id": "q0", "question": "duplicate id"})]
        path.write_text("\n".join(lines) + "\n")
    elif fmt == "csv":
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["id", "question"])
            w.writeheader()
            w.writerows(rows)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_answer_job_reads_every_format_and_keeps_bad_lines(mini_index, test_config, tmp_path, fmt):
    index_dir, _ = mini_index
    qfile = write_questions(tmp_path / f"questions.{fmt}", fmt)
    out = tmp_path / "answers.jsonl"
    summary = run_answer(test_config, str(index_dir), str(qfile), str(out), progress=False, log=lambda *_: None)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    good = [r for r in recs if r["status"] != "error"]
    assert len(good) == len(KNOWN) and len({r["id"] for r in good}) == len(KNOWN)
    for r in good:
        assert set(r) >= {"id", "question", "answer", "status", "citations", "retrieved", "index_version"}
        assert len(r["retrieved"]) == test_config.output.retrieved_top_k
        assert [x["rank"] for x in r["retrieved"]] == list(range(1, 11))
    errors = [r for r in recs if r["status"] == "error"]
    if fmt == "jsonl":
        reasons = " | ".join(r["error"] for r in errors)
        assert len(errors) == 3 and "unreadable JSON" in reasons and "missing id" in reasons \
            and "duplicate id" in reasons
    assert summary["questions_written"] == len(recs)


def _answer_cmd(index_dir, qfile, out, kill_at=None):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("RAGBEAM_FAULT_KILL_AT", None)
    env["RAGBEAM__OUTPUT__SHARDS"] = "8"  # fixed shards (the default sizes them by question count)
    if kill_at:
        env["RAGBEAM_FAULT_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "answer", "--quiet", "--index", str(index_dir),
                           "--questions", str(qfile), "--output", str(out)],
                          capture_output=True, text=True, env=env, timeout=600)


def test_resume_after_a_killed_run_gives_the_same_output(mini_index, tmp_path):
    index_dir, _ = mini_index
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"id": f"q{i:03d}", "question": q}) + "\n"
                             for i, q in enumerate([q for q, _ in KNOWN] * 5)))
    whole = tmp_path / "whole.jsonl"
    assert _answer_cmd(index_dir, qfile, whole).returncode == 0

    resumed = tmp_path / "resumed.jsonl"
    killed = _answer_cmd(index_dir, qfile, resumed, kill_at="after_shard:2")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not resumed.exists()
    assert len(list((tmp_path / "resumed.jsonl.parts").glob("shard-*"))) == 2
    again = _answer_cmd(index_dir, qfile, resumed)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2/8 shards already written" in again.stdout
    assert resumed.read_text() == whole.read_text()
    ids = [json.loads(line)["id"] for line in resumed.read_text().splitlines()]
    assert len(ids) == len(set(ids)) == 30


def test_questions_from_s3_and_parquet_output(mini_index, test_config, s3_server, tmp_path):
    index_dir, _ = mini_index
    qfile = write_questions(tmp_path / "questions.jsonl", "jsonl")
    c = s3_server.client()
    c.create_bucket(Bucket="questions")
    c.upload_file(str(qfile), "questions", "nightly/questions.jsonl")
    cfg = test_config.model_copy(update={
        "s3": test_config.s3.model_copy(update={
            "endpoint_url": s3_server.endpoint_url, "region": s3_server.region,
            "access_key_id": s3_server.access_key, "secret_access_key": s3_server.secret_key}),
        "output": test_config.output.model_copy(update={"format": "parquet"})})
    out = tmp_path / "answers.parquet"
    run_answer(cfg, str(index_dir), "s3://questions/nightly/questions.jsonl", str(out), progress=False,
               log=lambda *_: None)
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == len(KNOWN) + 3
    answered = [r for r in rows if r["status"] == "answered"]
    assert len(answered) == len(KNOWN)
    assert all(json.loads(r["citations"]) and len(json.loads(r["retrieved"])) == 10 for r in answered)


def test_a_new_question_file_never_reuses_old_shards(mini_index, test_config, tmp_path):
    """The same path, the same ids (so the same shards), the same number of lines, but other
    questions: a finished run's shards are all still on disk, and only the _run.json
    fingerprint tells this new job from a resumed one."""
    index_dir, _ = mini_index
    out = tmp_path / "answers.jsonl"
    qfile = tmp_path / "questions.jsonl"
    ids = ["a", "b", "c"]
    qfile.write_text("".join(json.dumps({"id": i, "question": KNOWN[n][0]}) + "\n" for n, i in enumerate(ids)))
    first = run_answer(test_config, str(index_dir), str(qfile), str(out), progress=False, log=lambda *_: None)
    written = sorted(p.name for p in (tmp_path / "answers.jsonl.parts").glob("shard-*"))
    assert first["shards_skipped"] == 0 and written

    new_questions = [KNOWN[n][0] for n in (3, 2, 1)]
    qfile.write_text("".join(json.dumps({"id": i, "question": q}) + "\n" for i, q in zip(ids, new_questions)))
    summary = run_answer(test_config, str(index_dir), str(qfile), str(out), progress=False, log=lambda *_: None,
                         overwrite=True)  # issue 12: without it a different job's output is refused
    assert summary["shards_skipped"] == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["id"]: r["question"] for r in recs} == dict(zip(ids, new_questions))

    # Other settings (here: how many retrieved rows are written) are another job too.
    cfg = test_config.model_copy(update={"output": test_config.output.model_copy(update={"retrieved_top_k": 3})})
    summary = run_answer(cfg, str(index_dir), str(qfile), str(out), progress=False, log=lambda *_: None,
                         overwrite=True)
    assert summary["shards_skipped"] == 0
    assert all(len(json.loads(line)["retrieved"]) == 3 for line in out.read_text().splitlines())


def test_trace_shows_every_stage_and_the_context(mini_index, test_config, tmp_path):
    index_dir, _ = mini_index
    qfile = write_questions(tmp_path / "questions.csv", "csv")
    out = tmp_path / "answers.jsonl"
    run_answer(test_config, str(index_dir), str(qfile), str(out), progress=False, log=lambda *_: None, trace=True)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs and all("trace" in r for r in recs)
    for r in recs:
        t = r["trace"]
        assert set(t) == {"dense", "bm25", "fused", "reranked", "context", "ms_per_question"}
        assert t["fused"] and all(isinstance(cid, str) and isinstance(s, float) for cid, s in t["fused"])
        # the context is what the answerer saw, and every citation points into it
        ctx = {c["chunk_id"] for c in t["context"]}
        assert {c["chunk_id"] for c in r["citations"]} <= ctx
        # with the fixed-scale scores the evidence model weighed (why an answer was refused): the
        # top_chunks' (a call question also reads further definitions, answer.call_chunks)
        assert all(-1 <= c["dense_cosine"] <= 1 and 0 <= c["bm25_coverage"] <= 1 + 1e-6
                   for c in t["context"][:test_config.answer.top_chunks])
        assert set(t["ms_per_question"]) == {"embed", "retrieve", "rerank", "answer"}
        assert [x["chunk_id"] for x in r["retrieved"]][:len(t["reranked"])] == [c for c, _ in t["reranked"]][:10]
    plain = tmp_path / "plain.jsonl"
    run_answer(test_config, str(index_dir), str(qfile), str(plain), progress=False, log=lambda *_: None)
    assert all("trace" not in json.loads(line) for line in plain.read_text().splitlines())


# --- outputs: never mixed, never overwritten; bad fields fail only their question -------------

def test_a_second_answer_run_on_the_same_output_is_refused(mini_index, test_config, tmp_path):
    from pipelines.answer import run_answer
    from transforms.common.lock import BusyError
    index_dir, _ = mini_index
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "question": "What is glob?"}) + "\n")
    out = tmp_path / "answers.jsonl"
    # A real second process holds the output's lock, as a concurrent run would.
    holder = subprocess.Popen([sys.executable, "-c",
                               "import sys, time; sys.path.insert(0, sys.argv[2]);"
                               "from transforms.common.lock import exclusive_lock\n"
                               "with exclusive_lock(sys.argv[1] + '.lock', sys.argv[1]):\n"
                               "    print('locked', flush=True); time.sleep(60)", str(out), str(ROOT)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(BusyError, match="being written by another run"):
            run_answer(test_config, str(index_dir), str(q), str(out), progress=False, log=lambda *_: None)
        assert not out.exists() and not (tmp_path / "answers.jsonl.parts").exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_finished_output_is_not_overwritten_by_another_job(mini_index, test_config, tmp_path):
    from pipelines.answer import run_answer
    from transforms.query.output_stats import OutputExistsError
    index_dir, _ = mini_index
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    first.write_text(json.dumps({"id": "a", "question": "What is glob?"}) + "\n")
    second.write_text(json.dumps({"id": "b", "question": "What is json?"}) + "\n")
    out = tmp_path / "answers.jsonl"
    run_answer(test_config, str(index_dir), str(first), str(out), progress=False, log=lambda *_: None)
    before = out.read_text()
    with pytest.raises(OutputExistsError, match="different job"):
        run_answer(test_config, str(index_dir), str(second), str(out), progress=False, log=lambda *_: None)
    assert out.read_text() == before
    # the same job again is a resume (nothing to redo), not an overwrite
    s = run_answer(test_config, str(index_dir), str(first), str(out), progress=False, log=lambda *_: None)
    assert s["answered_this_run"] == 0 and out.read_text() == before


def test_bad_filters_and_acl_fail_only_their_question_and_keep_the_id(mini_index, test_config, tmp_path):
    from pipelines.answer import run_answer
    index_dir, _ = mini_index
    out = tmp_path / "answers.jsonl"
    run_answer(test_config, str(index_dir), str(HOSTILE / "bad_fields.jsonl"), str(out), progress=False,
               log=lambda *_: None)
    recs = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(recs) == {"good1", "good2", "f-list", "f-int", "f-key", "acl-int", "acl-obj", "acl-nobody"}
    assert recs["good1"]["status"] == recs["good2"]["status"] == "answered"
    for qid in ("f-list", "f-int", "f-key", "acl-int", "acl-obj", "acl-nobody"):
        assert recs[qid]["status"] == "error", qid
    assert "filters must be a JSON object" in recs["f-list"]["error"]
    assert "not a metadata name" in recs["f-key"]["error"]
    assert "acl must be a list" in recs["acl-obj"]["error"]


def test_a_resumed_run_counts_the_whole_output(mini_index, test_config, tmp_path):
    from pipelines.answer import run_answer
    index_dir, _ = mini_index
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"id": f"q{i}", "question": t}) + "\n" for i, t in enumerate(
        ["What is glob?", "How do I serialize JSON?", "What does fnmatch do?", "What is punycode?",
         "What is ERR_CONN_4042?", "Are we ISO-27001 certified?"])) + "{broken\n")
    out = tmp_path / "answers.jsonl"
    whole = run_answer(test_config, str(index_dir), str(q), str(out), progress=False, log=lambda *_: None)
    parts = sorted((tmp_path / "answers.jsonl.parts").glob("shard-*"))
    non_empty = [p for p in parts if p.stat().st_size]
    non_empty[0].unlink()  # as if the run had died before this shard
    out.unlink()
    resumed = run_answer(test_config, str(index_dir), str(q), str(out), progress=False, log=lambda *_: None)
    assert resumed["shards_skipped"] == len(parts) - 1
    for k in ("questions_written", "answered", "not_found", "errors", "unsupported"):
        assert resumed[k] == whole[k], k
    assert resumed["answered"] + resumed["not_found"] + resumed["errors"] + resumed["unsupported"] == 7
