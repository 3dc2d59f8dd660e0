"""Secrets never written out, end to end: the index manifest and the eval report, an LLM server
that quotes the key back in a 401, and a worker that only unpickled the config."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

from configs.schema import load_config
from tests.unit.test_secrets import (ANSWER_KEY, LLM_KEY, MASK, OPTION_PASSWORD, S3_SECRET, SECRET_YAML, URL_PASSWORD,
                                     write)

ROOT = Path(__file__).resolve().parents[2]


def _answer_with_401_quoting_the_key(key: str, base_url_user: str = ""):
    from tests.fake_chat import chat_server
    from transforms.query.answer import GeneratorAnswerer, OpenAICompatibleClient
    from transforms.query.records import Candidate
    sources = [Candidate(doc_id="d", chunk_id="c1", source_uri="a.html", score=0.9, text="Some text.")]
    with chat_server() as server:
        server.script.append((401, f"Incorrect API key provided: {key}. Basic auth was "
                                   f"{base_url_user or 'none'}.", 0))
        client = OpenAICompatibleClient(f"http://{base_url_user}127.0.0.1:{server.server_port}/v1", "tiny",
                                        api_key=key, timeout=5, retries=0)
        (r,) = GeneratorAnswerer(client).answer(["q?"], [sources])
    return r


def test_the_index_manifest_and_the_eval_report_hold_no_secret(tmp_path, capsys, monkeypatch):
    """Through the CLI: `ragbeam eval` indexes a tiny BEIR set (manifest.json) and writes
    report.json and report.html; none holds a secret, and nothing printed does."""
    from pipelines.cli import main
    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    docs = {"tea": ("Brewing tea", "Green tea is brewed with water at about 80 degrees Celsius for two minutes."),
            "bee": ("The waggle dance", "Honeybees perform a waggle dance to tell their sisters where flowers are."),
            "chess": ("Castling", "Castling is not allowed when the king is in check.")}
    (data / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": t, "text": x}) + "\n"
                                               for k, (t, x) in docs.items()))
    (data / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "How hot should water be for green tea?"})
                                        + "\n" + json.dumps({"_id": "q2", "text": "How do bees show where flowers are?"})
                                        + "\n")
    (data / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ttea\t2\nq2\tbee\t2\n")
    cfg = write(tmp_path, SECRET_YAML.replace("s3: {access_key_id: AKIA-h3-KEYID99, secret_access_key: "
                                              f"{S3_SECRET}}}", "")
                .replace("runner: {options: {s3_secret_access_key: " + OPTION_PASSWORD
                         + ", temp_location: 'file:///tmp/x'}}", ""))
    monkeypatch.setenv("RAGBEAM__LLM__API_KEY", LLM_KEY)
    report_dir = tmp_path / "report"
    assert main(["eval", "--config", cfg, "--dataset", str(data), "--output", str(report_dir), "--quiet"]) == 0
    printed = capsys.readouterr()
    written = [Path(root) / f for root, _, files in os.walk(report_dir) for f in files
               if f.endswith((".json", ".jsonl", ".html", ".txt"))]
    names = {p.name for p in written}
    assert {"manifest.json", "report.json", "report.html"} <= names, names
    for path in written:
        text = path.read_text(encoding="utf-8", errors="replace")
        for secret in (LLM_KEY, ANSWER_KEY, URL_PASSWORD):
            assert secret not in text, (secret, path)
    report = json.loads((report_dir / "report.json").read_text())
    assert report["config"]["llm"]["api_key"] == MASK and report["config"]["llm"]["base_url"].startswith("http://***@")
    for secret in (LLM_KEY, ANSWER_KEY, URL_PASSWORD):
        assert secret not in printed.out + printed.err


def test_a_401_body_quoting_the_key_never_reaches_the_answer_record():
    key = "sk-quoted-back-h3-0042x"
    r = _answer_with_401_quoting_the_key(key)
    assert r.status == "error" and "HTTP 401" in r.error and "Incorrect API key provided: ***" in r.error
    assert key not in r.error


def test_the_answer_job_writes_no_key_a_server_quotes_back(tmp_path, mini_index):
    """The whole answer job: the generator's server answers 401 quoting the key; the answer
    file, its shards and its summary hold the HTTP status, never the key."""
    from pipelines.answer import run_answer
    from tests.fake_chat import chat_server
    index_dir, _ = mini_index
    key = "sk-answer-job-h3-7731q"
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join(json.dumps({"id": f"q{i}", "question": q}) + "\n"
                             for i, q in enumerate(["What does ERR_CONN_4042 mean?", "How do I serialize JSON?"])))
    with chat_server() as server:
        server.script.extend([(401, f"invalid_api_key: {key} is not valid", 0)] * 2)
        cfg = load_config(write(tmp_path, f"answer: {{kind: openai, base_url: 'http://127.0.0.1:"
                                          f"{server.server_port}/v1', model: tiny, retries: 0}}"),
                          environ={"RAGBEAM__ANSWER__API_KEY": key})
        out = tmp_path / "answers.jsonl"
        run_answer(cfg, str(index_dir), str(qfile), str(out), progress=False, log=lambda *_: None)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["status"] for r in rows} == {"error"} and all("HTTP 401" in r["error"] for r in rows)
    written = [Path(root) / f for root, _, files in os.walk(tmp_path) for f in files]
    assert any(p.name.endswith(".summary.json") for p in written)
    for path in written:
        if path.suffix == ".yaml":
            continue
        assert key.encode() not in path.read_bytes(), path


def test_a_worker_that_only_unpickled_the_config_redacts_its_secrets(tmp_path):
    """Beam pickles the config to the workers: unpickling it makes its secrets known there."""
    key = "sk-worker-h3-90210p"
    cfg = load_config(write(tmp_path, "llm: {base_url: 'http://bob:" + URL_PASSWORD + "@h:1/v1'}"),
                      environ={"RAGBEAM__LLM__API_KEY": key})
    blob = tmp_path / "cfg.pickle"
    blob.write_bytes(pickle.dumps(cfg))
    code = ("import pickle, sys\n"
            "from transforms.common.redact import redact_text\n"
            f"before = redact_text('k={key} p={URL_PASSWORD}')\n"
            f"cfg = pickle.loads(open(sys.argv[1], 'rb').read())\n"
            f"print(before, '|', redact_text('k={key} p={URL_PASSWORD}'))\n")
    got = subprocess.run([sys.executable, "-c", code, str(blob)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    before, after = got.stdout.strip().split(" | ")
    assert key in before  # nothing known before the config arrives
    assert after == "k=*** p=***"
