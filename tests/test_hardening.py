"""Issue 12: hostile inputs, concurrent runs and secrets. One test (or more) per numbered item;
each fails on the code before the fix. Inputs live in tests/hostile/ or are made by fixtures."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from configs.schema import ConfigError, load_config
from tests.fake_chat import chat_server
from transforms.index.shards import read_table
from transforms.query.records import Candidate, InputError, Question

HOSTILE = Path(__file__).parent / "hostile"
ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _errors_by_id(recs):
    return {r.id: r for r in recs if isinstance(r, InputError)}


# --- nothing lost, nothing mixed ------------------------------------------------------------

def test_01_a_second_answer_run_on_the_same_output_is_refused(mini_index, test_config, tmp_path):
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


def test_01_a_finished_output_is_not_overwritten_by_another_job(mini_index, test_config, tmp_path):
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


@pytest.fixture
def hostile_corpus(tmp_path):
    """A corpus with a non-UTF-8 file name, a link out of the root, a dangling link and a FIFO."""
    root = tmp_path / "corpus"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "good.md").write_text("# Good\n\nThe frobnicator turns widgets into gadgets.\n")
    bad = os.path.join(os.fsencode(root / "docs"), b"bad\xffname.md")
    with open(bad, "wb") as f:
        f.write(b"# Bad name\n\nThis file has a name that is not UTF-8.\n")
    outside = tmp_path / "outside-secret.txt"
    outside.write_text("root:x:0:0:root:/root:/bin/bash\n")
    os.symlink(outside, root / "docs" / "passwd-link.txt")
    os.symlink(tmp_path, root / "escape-dir")
    os.symlink(root / "missing.md", root / "docs" / "dangling.md")
    os.mkfifo(root / "docs" / "pipe.md")
    return root


def test_02_13_14_hostile_names_and_links_never_sink_the_index_job(hostile_corpus, test_config, tmp_path):
    from pipelines.index import run_index
    from transforms.index.publish import resolve_index
    index_dir = tmp_path / "index"
    s = run_index(test_config, str(hostile_corpus), str(index_dir), progress=False, log=lambda *_: None)
    assert s["balanced"]
    assert s["listed"] == 2 and s["parsed"] == 1 and s["dead_lettered"] == 1  # good.md + the bad name
    version = resolve_index(str(index_dir))
    dead = read_table(version, "dead_letters").to_pylist()
    assert [(d["source_uri"].endswith("bad\\xffname.md"), d["reason"]) for d in dead] == \
        [(True, "file name is not valid UTF-8")]
    assert s["skipped_at_listing"] == {"symlink_outside_root": 2, "dangling_link": 1, "not_a_regular_file": 1}
    chunks = read_table(version, "chunks").to_pylist()
    assert not any("root:x:0:0" in c["text"] for c in chunks)  # /etc/passwd-like target not indexed


def test_13_links_out_of_the_root_can_be_allowed(hostile_corpus):
    from transforms.ingest.read import list_objects
    report: dict = {}
    keys = {o.key for o in list_objects(str(hostile_corpus), report=report, follow_outside=True)}
    assert "docs/passwd-link.txt" in keys and "symlink_outside_root" not in report


def test_03_a_csv_field_over_128_kib_is_one_error_record(tmp_path):
    from transforms.query.questions.read import read_questions
    p = tmp_path / "q.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "question"])
        w.writerow(["q1", "What is glob?"])
        w.writerow(["big", "x" * (200 * 1024)])
        w.writerow(["q3", "What is json?"])
    recs = list(read_questions(str(p)))
    assert [r.id for r in recs if isinstance(r, Question)] == ["q1", "q3"]
    (err,) = [r for r in recs if isinstance(r, InputError)]
    assert err.id == "big" and "longer than 131072" in err.reason


def test_04_05_bad_filters_and_acl_fail_only_their_question_and_keep_the_id(mini_index, test_config, tmp_path):
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


def test_05_unreadable_csv_filters_keep_the_id(tmp_path):
    from transforms.query.questions.read import read_questions
    p = tmp_path / "q.csv"
    p.write_text('id,question,filters,acl\nq1,What?,{not json,\nq2,What?,,\n')
    recs = list(read_questions(str(p)))
    assert recs[0].id == "q1" and "filters is not valid JSON" in recs[0].reason
    assert isinstance(recs[1], Question)


@pytest.mark.parametrize("name, message", [
    ("missing.jsonl", "question file not found"),
    ("empty.jsonl", "question file is empty"),
    ("not_parquet.parquet", "not a readable Parquet file"),
    ("questions.txt", "cannot tell the question file format"),
])
def test_06_whole_file_problems_get_a_short_error_before_any_pipeline(tmp_path, capsys, name, message):
    from pipelines.cli import main
    src = HOSTILE / name
    q = tmp_path / name
    if src.exists():
        q.write_bytes(src.read_bytes())
    elif name.endswith(".txt"):
        q.write_text("id,question\n")
    out = tmp_path / "answers.jsonl"
    rc = main(["answer", "--index", str(tmp_path / "no-index"), "--questions", str(q), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.splitlines()) <= 2
    assert not (tmp_path / "answers.jsonl.parts").exists()


def test_07_an_index_inside_its_input_is_refused(tmp_path, test_config):
    from pipelines.index import IndexPathError, run_index
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.md").write_text("# A\n\ntext\n")
    with pytest.raises(IndexPathError, match="inside --input"):
        run_index(test_config, str(corpus), str(corpus / "index"), progress=False, log=lambda *_: None)
    assert not (corpus / "index").exists()


def test_08_a_resumed_run_counts_the_whole_output(mini_index, test_config, tmp_path):
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


def test_09_an_unclosed_quote_is_reported_and_every_row_is_accounted_for():
    from transforms.query.questions.read import read_questions
    recs = list(read_questions(str(HOSTILE / "unclosed_quote.csv")))
    assert len(recs) == 3  # three data rows in, three records out
    by_id = _errors_by_id(recs)
    assert "unclosed quote" in by_id["q1"].reason
    assert "swallowed by an unclosed quote on line 2" in by_id["q2"].reason
    assert [r.line for r in recs] == [2, 3, 4]


# --- access rules fail closed ---------------------------------------------------------------

def test_10_an_acl_rule_with_no_groups_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"acl.0.groups: List should have at least 1 item"):
        load_config(write(tmp_path, "acl: [{prefix: vault/, groups: []}]"), environ={})
    with pytest.raises(ConfigError, match=r"acl.0.groups.0"):
        load_config(write(tmp_path, "acl: [{prefix: vault/, groups: ['']}]"), environ={})


def _parse(uri, key, data, rules, root=None):
    from transforms.ingest.parse import parse_unique
    from transforms.records import RawObject, UniqueObject
    raw = RawObject.from_bytes(uri, key, data)
    return parse_unique(UniqueObject(raw, (uri,)), rules, root)[0]


def test_11_a_record_acl_only_narrows_its_path_rule():
    from transforms.ingest.acl import NOBODY
    rules = (("restricted/", ("staff", "hr")),)
    lines = [{"id": "wide", "text": "t1", "acl": ["everyone", "staff"]},
             {"id": "other", "text": "t2", "acl": ["everyone"]},
             {"id": "plain", "text": "t3"}]
    data = "\n".join(json.dumps(r) for r in lines).encode()
    docs = {d.metadata["record_id"]: d.acl for d in _parse("/c/restricted/r.jsonl", "restricted/r.jsonl", data, rules)}
    assert docs == {"wide": ["staff"], "other": [NOBODY], "plain": ["staff", "hr"]}
    # no rule on the path: the record's own acl stands
    docs = {d.metadata["record_id"]: d.acl for d in _parse("/c/open/r.jsonl", "open/r.jsonl", data, rules)}
    assert docs["wide"] == ["everyone", "staff"] and docs["plain"] == []


def test_12_rules_do_not_depend_on_where_the_listing_started(tmp_path):
    rules = (("secret/", ("staff",)),)
    data = b"# Plan\n\nThe secret plan.\n"
    # listed from corpus/: key secret/plan.md; listed from corpus/secret: key plan.md
    for key in ("secret/plan.md", "plan.md"):
        (doc,) = _parse("/data/corpus/secret/plan.md", key, data, rules)
        assert doc.acl == ["staff"], key
    # with source.root, keys are relative to it
    (doc,) = _parse("/data/corpus/secret/plan.md", "plan.md", data, rules, root="/data/corpus")
    assert doc.acl == ["staff"]
    (doc,) = _parse("s3://b/corpus/secret/plan.md", "plan.md", data, rules, root="s3://b/corpus")
    assert doc.acl == ["staff"]
    (doc,) = _parse("/data/corpus/public/plan.md", "plan.md", data, rules, root="/data/corpus")
    assert doc.acl == []


# --- generated answers are checked, not trusted ---------------------------------------------

@pytest.fixture
def hostile_llm():
    with chat_server() as server:
        yield server


SOURCES = [
    Candidate(doc_id="json", chunk_id="c1", source_uri="json.html", score=0.9,
              text="json.dumps(obj) serializes obj to a JSON formatted str."),
    Candidate(doc_id="pathlib", chunk_id="c2", source_uri="pathlib.html", score=0.8,
              text="Path.mkdir(parents=True) creates any missing parent directories of the path."),
]


def _generate(server, reply, **client_kw):
    from transforms.query.answer import GeneratorAnswerer, OpenAICompatibleClient
    server.script.append((200, reply, 0))
    client = OpenAICompatibleClient(f"http://127.0.0.1:{server.server_port}/v1", "tiny", **client_kw)
    (r,) = GeneratorAnswerer(client).answer(["How do I create parent dirs?"], [SOURCES])
    return r


REPLIES = json.loads((HOSTILE / "replies.json").read_text())


@pytest.mark.parametrize("kind", ["all_invalid", "no_citation"])
def test_15_a_reply_with_no_valid_citation_is_not_answered(hostile_llm, kind):
    r = _generate(hostile_llm, REPLIES[kind], timeout=5)
    assert r.status == "unsupported" and r.answer == "" and r.citations == []
    assert "PWNED" not in r.answer and "evil" not in r.answer
    assert r.n_sentences_removed >= 1


def test_15_unsupported_sentences_and_invented_quotes_are_removed_and_counted(hostile_llm):
    r = _generate(hostile_llm, REPLIES["fake_quote"], timeout=5)
    assert r.status == "answered" and r.answer == "Use Path.mkdir(parents=True) [2]."
    assert (r.n_sentences_removed, r.n_quotes_removed) == (1, 1)
    r = _generate(hostile_llm, REPLIES["mixed"], timeout=5)
    assert r.answer == "Use Path.mkdir(parents=True) [2]." and "evil" not in r.answer
    assert r.n_sentences_removed == 1


def test_16_timeout_retries_and_budget_are_settings(hostile_llm, tmp_path):
    from transforms.query.answer import GeneratorAnswerer
    from transforms.query.engine import _chat_client
    cfg = load_config(write(tmp_path, f"""
answer: {{kind: openai, base_url: 'http://127.0.0.1:{hostile_llm.server_port}/v1', model: tiny,
          timeout_s: 0.3, retries: 1, backoff_s: 0, budget_s: 1.0}}
"""), environ={})
    client = _chat_client(cfg.answer)
    assert (client.timeout, client.retries, client.budget_s) == (0.3, 1, 1.0)
    hostile_llm.script += [(200, "slow [1].", 2), (200, "slow [1].", 2)]
    t0 = time.monotonic()
    (r,) = GeneratorAnswerer(client).answer(["q"], [SOURCES])
    assert r.status == "error" and "failed" in r.error and time.monotonic() - t0 < 1.5  # 2 tries x 0.3 s
    hostile_llm.script += [(200, "slow [1].", 2)] * 4
    results = GeneratorAnswerer(client, concurrency=1).answer(["q"] * 4, [SOURCES] * 4)
    assert "budget_s" in results[-1].error  # the rest fail at once once the budget is spent
    assert time.monotonic() - t0 < 4
    d = load_config(environ={}).answer
    assert (d.timeout_s, d.retries, d.budget_s) == (30.0, 2, 3600.0)


# --- secrets ---------------------------------------------------------------------------------

def test_17_secret_values_are_never_echoed_in_config_errors(tmp_path):
    for var, key in (("RAGBEAM__ANSWER__API_KEY", "answer.api_key"),
                     ("RAGBEAM__S3__SECRET_ACCESS_KEY", "s3.secret_access_key")):
        with pytest.raises(ConfigError) as e:
            load_config(write(tmp_path, "answer: {api_key: [80412345678]}\ns3: {secret_access_key: [80412345678]}"),
                        environ={})
        assert "80412345678" not in str(e.value) and "value hidden" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "runner: {options: {sdk_container_password: [hunter22]}}"), environ={})
    assert "hunter22" not in str(e.value)


def test_17_environment_overrides_are_strings_unless_the_type_says_otherwise(tmp_path):
    p = write(tmp_path, "")
    cfg = load_config(p, environ={"RAGBEAM__ANSWER__API_KEY": "abc #def", "RAGBEAM__S3__REGION": "null",
                                  "RAGBEAM__S3__SECRET_ACCESS_KEY": "80412345678",
                                  "RAGBEAM__CHUNK__OVERLAP_TOKENS": "10",
                                  "RAGBEAM__SOURCE__FULL_HASH": "true",
                                  "RAGBEAM__ACL": '[{"prefix": "a/", "groups": ["g"]}]'})
    assert cfg.answer.api_key == "abc #def" and cfg.s3.region == "null"
    assert cfg.s3.secret_access_key == "80412345678"
    assert cfg.chunk.overlap_tokens == 10 and cfg.source.full_hash is True and cfg.acl[0].groups == ["g"]


def test_18_url_user_info_is_masked_in_error_records_and_the_manifest(hostile_llm, tmp_path):
    from transforms.index.manifest import manifest_config
    from transforms.query.answer import GeneratorAnswerer, OpenAICompatibleClient
    # unreachable: the error record names the URL, never the password
    client = OpenAICompatibleClient("http://bob:s3cr3tpw@127.0.0.1:9/v1", "tiny", timeout=0.5, retries=0)
    (r,) = GeneratorAnswerer(client).answer(["q"], [SOURCES])
    assert r.status == "error" and "s3cr3tpw" not in r.error and "bob" not in r.error and "127.0.0.1:9" in r.error
    # reachable: the user info goes as a Basic auth header, not in the URL
    hostile_llm.script.append((200, "Use Path.mkdir(parents=True) [2].", 0))
    client = OpenAICompatibleClient(f"http://bob:s3cr3tpw@127.0.0.1:{hostile_llm.server_port}/v1", "tiny",
                                    timeout=5)
    (r,) = GeneratorAnswerer(client).answer(["q"], [SOURCES])
    assert r.status == "answered" and hostile_llm.auth[-1].startswith("Basic ")
    cfg = load_config(write(tmp_path, """
answer: {kind: openai, base_url: 'http://bob:s3cr3tpw@llm.internal/v1', model: m}
runner: {options: {s3_secret_access_key: hunter22, temp_location: 's3://k:v@b/tmp', project: p}}
"""), environ={})
    text = json.dumps(manifest_config(cfg))
    assert "s3cr3tpw" not in text and "hunter22" not in text and "k:v@" not in text
    assert "http://***@llm.internal/v1" in text and '"project": "p"' in text


# --- config that cannot work is refused at load ----------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("embed: {max_length: 16}", "chunk.chunk_tokens: chunk_tokens 200 + context_tokens 40 + 2 special tokens "
                                "= 242 exceeds embed.max_length 16"),
    ("chunk: {chunk_tokens: 254, context_tokens: 128}", "exceeds embed.max_length 256"),
    ("chunk: {chunk_tokens: 32, overlap_tokens: 32}", "chunk.overlap_tokens: 32 must be smaller"),
    ("answer: {kind: openai}", "answer.base_url: required when answer.kind is openai"),
    ("rerank: {kind: cross_encoder}", "rerank.model_dir: required"),
    ("gate: {dataset: /nonexistent/set}", "gate.dataset: directory not found"),
    ("rewrite: {kind: hyde}", "llm.base_url: required by rewrite.kind: hyde"),
    ("contextualize: {kind: llm}\nllm: {base_url: 'http://h:1/v1'}", "llm.model: required by contextualize.kind: llm"),
    ("judge: {max_questions: 5}\nllm: {base_url: 'ftp://u:pw@h/v1', model: m}", "llm.base_url: expected http"),
])
def test_19_settings_that_cannot_work_together_are_refused_at_load(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+").replace(".", r"\.")):
        load_config(write(tmp_path, text), environ={})


# --- issue 10: any Beam runner, options checked by Beam's parser ----------------------------

@pytest.mark.parametrize("text, message", [
    ("runner: {name: Nope}", "runner.name: unknown runner 'Nope'"),
    ("runner: {name: 'my.pkg.'}", "runner.name: not a runner name"),
    ("runner: {options: {direct_num_workers: abc}}", "runner.options.direct_num_workers: argument "
                                                     "--direct_num_workers: invalid int value"),
    ("runner: {options: {no_such_option: 1}}", "runner.options.no_such_option: not a Beam pipeline option"),
])
def test_runner_name_and_options_are_checked_by_beam_at_load(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(write(tmp_path, text), environ={})


def test_any_known_runner_or_a_runner_class_is_accepted(tmp_path):
    for name in ("DataflowRunner", "FlinkRunner", "PrismRunner", "direct",
                 "apache_beam.runners.direct.direct_runner.BundleBasedDirectRunner"):
        cfg = load_config(write(tmp_path, f"runner: {{name: {name}, options: {{streaming: true, "
                                          "project: p, flink_master: 'localhost:8081'}}"), environ={})
        assert cfg.runner.name == name
