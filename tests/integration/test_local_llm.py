"""The answer job against a real local LLM: llama.cpp's llama-server with SmolLM2-135M-Instruct
(infra/llm/server.py, built and fetched by `make llm-setup`), on the mini index.

Whatever the model writes (half-cited sentences, invented source numbers, refusals in its own
words) goes through the citation checks in code: every kept sentence carries a valid citation,
and every span it quotes is in a source it cites (transforms/query/grounding.py; whether an
unquoted claim is supported by its source is not checked yet). The configured concurrency is what reaches the server's slots, and a
server lost mid-run gives error records after the retries, which a rerun answers again.
"""
import json
import threading
import time

import pytest

from infra.llm import server as llm
from pipelines.answer import run_answer
from tests.integration.test_answer_job import KNOWN
from transforms.index import publish
from transforms.query.cite import parse_citations
from transforms.query.grounding import ground_answer
from transforms.query.records import Candidate

UNANSWERABLE = "Who won the football world cup in 1954?"


def llm_config(test_config, base_url: str, **answer):
    a = test_config.answer.model_copy(update={
        "kind": "openai", "base_url": base_url, "model": llm.MODEL_NAME, "top_chunks": 2,
        "max_source_chars": 700, "max_tokens": 80, "concurrency": 3, "timeout_s": 120, "retries": 1,
        "backoff_s": 0.2, **answer})
    return test_config.model_copy(update={"answer": a})


def write_questions(path, questions) -> str:
    with open(path, "w", encoding="utf-8") as f:
        for i, q in enumerate(questions):
            f.write(json.dumps({"id": f"q{i}", "question": q}) + "\n")
    return str(path)


def read_records(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class BusySlots(threading.Thread):
    """The most requests the server was decoding at once (its /metrics gauge, sampled)."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server, self.most, self.stop_event = server, 0, threading.Event()

    def run(self):
        while not self.stop_event.is_set():
            try:
                self.most = max(self.most, int(self.server.metrics().get("llamacpp:requests_processing", 0)))
            except OSError:
                pass
            time.sleep(0.05)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.join(5)


@pytest.fixture(scope="module")
def chunk_texts(mini_index):
    from transforms.query.version_segments import VersionSegments
    version = publish.resolve_index(str(mini_index[0]))
    segs = VersionSegments(version, json.load(open(f"{version}/manifest.json")))
    rows = segs.segment(0).rows
    return dict(zip(rows.column("chunk_id").to_pylist(), rows.column("text").to_pylist()))


def test_real_model_output_goes_through_the_citation_checks(mini_index, test_config, local_llm, chunk_texts,
                                                            tmp_path):
    questions = [q for q, _ in KNOWN[:5]] + [UNANSWERABLE]
    qfile = write_questions(tmp_path / "q.jsonl", questions)
    out = str(tmp_path / "answers.jsonl")
    cfg = llm_config(test_config, local_llm.base_url, concurrency=3)
    before = local_llm.metrics()
    with BusySlots(local_llm) as busy:
        summary = run_answer(cfg, str(mini_index[0]), qfile, out, progress=False, log=lambda *_: None)
    recs = read_records(out)
    assert [r["id"] for r in recs] == [f"q{i}" for i in range(len(questions))]
    assert {r["status"] for r in recs} <= {"answered", "not_found", "unsupported"}, recs
    assert summary["errors"] == 0 and summary.get("shards_to_retry", 0) == 0
    # the configured concurrency reached the server (4 slots, 3 in flight), and every question was asked
    assert busy.most == 3, busy.most
    assert local_llm.metrics()["llamacpp:requests_processing"] == 0  # settled: nothing left in flight
    prompt_tokens = local_llm.metrics()["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"]
    assert prompt_tokens > 100 * len(questions)  # the sources went into the prompts
    for r in recs:
        if r["status"] != "answered":
            assert not r["citations"], r
            continue
        # every kept sentence cites a source it was given, and its quotes are in that source:
        # checking the kept answer again removes nothing more
        cited = {c["n"]: c["chunk_id"] for c in r["citations"]}
        assert cited and set(n for n in parse_citations(r["answer"])) <= set(cited), r
        sources = [Candidate(chunk_id=cid, doc_id="", text=chunk_texts[cid]) for cid in
                   (r["retrieved"][i]["chunk_id"] for i in range(2))]
        again = ground_answer(r["answer"], sources)
        assert again.sentences_removed == 0 and again.answer == r["answer"], (r["answer"], again)


def test_a_server_lost_mid_run_gives_error_records_and_a_rerun_answers_them(mini_index, test_config,
                                                                            tmp_path):
    port = llm.free_ports(1)[0]
    questions = [q for q, _ in KNOWN[:4]]
    qfile = write_questions(tmp_path / "q.jsonl", questions)
    out = str(tmp_path / "answers.jsonl")
    s = llm.start(parallel=1, threads=1, ctx_per_slot=1536, port=port, log_dir=str(tmp_path / "llm1"))
    try:
        def kill_after_first_answer():
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                try:
                    if s.metrics().get("llamacpp:tokens_predicted_total", 0) > 0 and \
                            s.metrics().get("llamacpp:requests_processing", 0) >= 1:
                        break  # one answer written, the next one in progress
                except OSError:
                    pass
                time.sleep(0.05)
            s.kill()
        killer = threading.Thread(target=kill_after_first_answer, daemon=True)
        killer.start()
        cfg = llm_config(test_config, s.base_url, concurrency=1, retries=2, backoff_s=0.3)
        summary = run_answer(cfg, str(mini_index[0]), qfile, out, progress=False, log=lambda *_: None)
        killer.join(10)
    finally:
        s.stop()
    recs = read_records(out)
    errors = [r for r in recs if r["status"] == "error"]
    assert len(recs) == len(questions) and errors and len(errors) < len(questions), recs
    for r in errors:  # after the retries, the reason is the backend's, with no secret in it
        assert r["error"].startswith("BackendError: request to http://127.0.0.1:") and "failed (3 attempts)" in r["error"], r
    assert summary["errors"] == len(errors) and summary["shards_to_retry"] >= 1
    # the server is back: a rerun of the same job answers the shards that held errors again
    s2 = llm.start(parallel=1, threads=1, ctx_per_slot=1536, port=port, log_dir=str(tmp_path / "llm2"))
    try:
        again = run_answer(cfg, str(mini_index[0]), qfile, out, progress=False, log=lambda *_: None)
    finally:
        s2.stop()
    recs = read_records(out)
    assert again["errors"] == 0 and again["shards_to_retry"] == 0, again
    assert again["shards_skipped"] == again["shards"] - summary["shards_to_retry"]
    assert [r["id"] for r in recs] == [f"q{i}" for i in range(len(questions))]
