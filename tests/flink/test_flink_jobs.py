"""ragbeam's own jobs, unchanged, on a real Flink cluster (two task managers) through Beam's
portable runner, from s3:// on the local S3 server to an s3:// index; every result compared
with the in-process runner's on the same input.

One module-scoped sequence (each step needs the previous one's index): index on both runners,
answer on both, a nightly run on both after changing, adding and deleting files. Then a run
whose counts do not reconcile, and an SDK worker killed mid-job.
"""
from __future__ import annotations

import json
import os
import threading
import time

import numpy as np
import pytest

from pipelines.answer import run_answer
from pipelines.index import UnbalancedRun, run_index
from tests.conftest import SAMPLES
from tests.integration.test_incremental import quiet, s3_config
from transforms.common import storage
from transforms.index import publish
from transforms.index.incremental import mirror_version
from transforms.index.shards import read_table

BUCKET = "flinkrun"
CORPUS = ["broken/truncated.pdf", "git/git-add.txt", "git/git-version.txt", "man/man1/ldd.1",
          "man/man3/fnmatch.3", "man/man3/globfree.3", "records/faq.jsonl", "nodejs/api/punycode.md",
          "python/library/fnmatch.html"]
QUESTIONS = [
    {"id": "q1", "question": "Which Python function tests whether a filename matches a shell-style pattern?"},
    {"id": "q2", "question": "How do I add file contents to the git index?"},
    {"id": "q3", "question": "What does ldd print?"},
    {"id": "q4", "question": "How do I convert a Unicode domain name to Punycode?"},
    {"id": "q5", "question": "What is the airspeed of an unladen swallow?"},
]
TABLES = ["chunks", "documents", "dead_letters", "near_duplicates", "signatures", "sources"]
RUN_COLUMNS = {"indexed_at", "tombstoned_at"}  # when a run happened, not what it made
VERSION_FIELDS = {"index_version"}  # each index has its own version name


def direct_config(test_config, s3_server):
    return s3_config(test_config, s3_server)


def flink_config(test_config, s3_server, stack, **options):
    cfg = s3_config(test_config, s3_server)
    runner = cfg.runner.model_copy(update={"name": "PortableRunner",
                                           "options": {**stack.runner_options(), **options}})
    return cfg.model_copy(update={"runner": runner})


def version_rows(index_uri: str, tmp_path, tag: str) -> dict[str, list[dict]]:
    """Every table of the live version, rows sorted by content (run timestamps dropped)."""
    local = mirror_version(publish.resolve_index(index_uri), str(tmp_path / f"mirror-{tag}"))
    out = {}
    for name in TABLES:
        try:
            t = read_table(local, name)
        except FileNotFoundError:
            out[name] = []
            continue
        t = t.select([c for c in t.column_names if c not in RUN_COLUMNS])
        out[name] = sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return out


def assert_same_rows(direct: dict, flink: dict) -> None:
    """Equal tables; float vectors equal to within 1e-6 per component (bit-identical where
    batches are composed alike), everything else exactly."""
    for name in TABLES:
        a, b = direct[name], flink[name]
        assert len(a) == len(b), (name, len(a), len(b))
        if name == "chunks":
            a = sorted(a, key=lambda r: r["chunk_id"])
            b = sorted(b, key=lambda r: r["chunk_id"])
            va = np.array([r.pop("embedding") for r in a], dtype=np.float32)
            vb = np.array([r.pop("embedding") for r in b], dtype=np.float32)
            assert np.abs(va - vb).max(initial=0.0) <= 1e-6, np.abs(va - vb).max()
        assert a == b, name


def newest_job(stack) -> dict:
    jobs = sorted(stack.jobs(), key=lambda j: j["start-time"])
    assert jobs, "no job reached the Flink cluster"
    return jobs[-1]


def assert_ran_on_both_task_managers(stack, job: dict) -> None:
    assert job["state"] == "FINISHED", job
    assert job["tasks"]["finished"] == job["tasks"]["total"] > 0, job["tasks"]
    all_tms = {tm["id"] for tm in stack.task_managers()}
    assert len(all_tms) == 2
    assert stack.job_task_managers(job["jid"]) == all_tms


def upload(s3_server, files: dict[str, bytes], prefix: str) -> None:
    c = s3_server.client()
    for rel, data in files.items():
        c.put_object(Bucket=BUCKET, Key=f"{prefix}/{rel}", Body=data)


def corpus_files() -> dict[str, bytes]:
    files = {rel: (SAMPLES / rel).read_bytes() for rel in CORPUS}
    files["copies/git-version.txt"] = files["git/git-version.txt"]  # an exact duplicate
    add = files["git/git-add.txt"].decode()
    files["copies/git-add-edited.txt"] = add.replace("git-add", "git-add(1)", 1).encode()  # a near-duplicate
    return files


def answers(uri: str) -> list[dict]:
    rows = [json.loads(line) for line in storage.read_text(uri).split("\n") if line.strip()]
    for r in rows:
        for k in VERSION_FIELDS:
            r.pop(k, None)
    return sorted(rows, key=lambda r: r.get("id") or "")


@pytest.fixture(scope="module")
def bucket(s3_server):
    c = s3_server.client()
    c.create_bucket(Bucket=BUCKET)
    upload(s3_server, corpus_files(), "corpus")
    c.put_object(Bucket=BUCKET, Key="questions.jsonl",
                 Body="".join(json.dumps(q) + "\n" for q in QUESTIONS).encode())
    return f"s3://{BUCKET}"


@pytest.fixture(scope="module")
def first_runs(bucket, flink, s3_server, test_config):
    """The corpus indexed on both runners (the in-process runner first)."""
    direct = run_index(direct_config(test_config, s3_server), f"{bucket}/corpus", f"{bucket}/direct-index",
                       progress=False, log=quiet)
    t0 = time.monotonic()
    on_flink = run_index(flink_config(test_config, s3_server, flink), f"{bucket}/corpus", f"{bucket}/flink-index",
                         progress=False, log=quiet)
    on_flink["_wall_s"] = time.monotonic() - t0
    return direct, on_flink, newest_job(flink)


def test_index_job_on_flink_equals_the_direct_runner(first_runs, flink, bucket, tmp_path):
    direct, on_flink, job = first_runs
    assert_ran_on_both_task_managers(flink, job)
    # the counters came back from the cluster and reconcile
    assert on_flink["balanced"] and on_flink["read"] == direct["read"] == len(corpus_files())
    for key in ("parsed", "duplicates", "dead_lettered", "documents", "near_duplicates", "chunks", "embedded"):
        assert on_flink[key] == direct[key], key
    assert on_flink["duplicates"] == 1 and on_flink["near_duplicates"] == 1 and on_flink["dead_lettered"] == 1
    assert_same_rows(version_rows(f"{bucket}/direct-index", tmp_path, "d1"),
                     version_rows(f"{bucket}/flink-index", tmp_path, "f1"))


def test_answer_job_on_flink_equals_the_direct_runner(first_runs, flink, s3_server, test_config, bucket):
    run_answer(direct_config(test_config, s3_server), f"{bucket}/direct-index", f"{bucket}/questions.jsonl",
               f"{bucket}/answers-direct.jsonl", progress=False, log=quiet)
    before = {j["jid"] for j in flink.jobs()}
    # a Flink runner option the Python SDK does not declare reaches the job (Java side)
    cfg = flink_config(test_config, s3_server, flink, execution_mode_for_batch="BATCH_FORCED")
    summary = run_answer(cfg, f"{bucket}/flink-index",
                         f"{bucket}/questions.jsonl", f"{bucket}/answers-flink.jsonl", progress=False, log=quiet)
    job = newest_job(flink)
    assert job["jid"] not in before
    assert_ran_on_both_task_managers(flink, job)
    assert flink.rest(f"/jobs/{job['jid']}/config")["execution-config"]["execution-mode"] == "BATCH_FORCED"
    direct_rows, flink_rows = answers(f"{bucket}/answers-direct.jsonl"), answers(f"{bucket}/answers-flink.jsonl")
    assert [r["id"] for r in flink_rows] == [q["id"] for q in QUESTIONS]
    assert flink_rows == direct_rows
    assert any(r["status"] == "answered" for r in flink_rows), flink_rows
    assert summary is not None


def test_nightly_run_on_flink_equals_the_direct_runners_nightly(first_runs, flink, s3_server, test_config,
                                                                 bucket, tmp_path):
    c = s3_server.client()
    changed = (SAMPLES / "man/man3/fnmatch.3").read_bytes().replace(b"pattern", b"wildcard pattern", 3)
    c.put_object(Bucket=BUCKET, Key="corpus/man/man3/fnmatch.3", Body=changed)
    c.put_object(Bucket=BUCKET, Key="corpus/man/man7/ascii.7", Body=(SAMPLES / "man/man7/ascii.7").read_bytes())
    c.delete_object(Bucket=BUCKET, Key="corpus/nodejs/api/punycode.md")
    direct = run_index(direct_config(test_config, s3_server), f"{bucket}/corpus", f"{bucket}/direct-index",
                       progress=False, log=quiet)
    on_flink = run_index(flink_config(test_config, s3_server, flink), f"{bucket}/corpus", f"{bucket}/flink-index",
                         progress=False, log=quiet)
    assert_ran_on_both_task_managers(flink, newest_job(flink))
    assert on_flink["balanced"]
    for key in ("added", "changed", "removed", "read", "unchanged_not_read", "chunks", "embedded", "cache_hits"):
        assert on_flink.get(key) == direct.get(key), (key, on_flink.get(key), direct.get(key))
    assert (on_flink["added"], on_flink["changed"], on_flink["removed"]) == (1, 1, 1)
    assert_same_rows(version_rows(f"{bucket}/direct-index", tmp_path, "d2"),
                     version_rows(f"{bucket}/flink-index", tmp_path, "f2"))


def test_a_run_whose_counts_do_not_reconcile_is_not_published(flink, s3_server, test_config, bucket):
    upload(s3_server, {rel: (SAMPLES / rel).read_bytes() for rel in ("git/git-version.txt", "man/man3/fnmatch.3")},
           "tiny")
    index = f"{bucket}/unbalanced-index"
    # the parse stage on the cluster's SDK workers silently drops one object
    cfg = flink_config(test_config, s3_server, flink)
    cfg = cfg.model_copy(update={"runner": cfg.runner.model_copy(update={"options": {
        **cfg.runner.options, **flink.runner_options({"RAGBEAM_FAULT_DROP": "parse:git-version.txt"})}})})
    with pytest.raises(UnbalancedRun, match=r"read 2 != parsed 1 \+ duplicates 0"):
        run_index(cfg, f"{bucket}/tiny", index, progress=False, log=quiet)
    assert newest_job(flink)["state"] == "FINISHED"  # the job ran; the driver refused to publish
    assert publish.current_version(index) is None


def test_a_killed_task_manager_fails_the_run_and_leaves_the_live_version(first_runs, flink, s3_server,
                                                                          test_config, bucket):
    """What Flink does here (no restart strategy is configured for batch jobs): a task manager
    killed with SIGKILL mid-job fails the job, the driver raises, and the live version is the
    one before. (Last in this module: the cluster has one task manager left after it.)"""
    index = f"{bucket}/flink-index"
    live = publish.current_version(index)
    c = s3_server.client()
    c.put_object(Bucket=BUCKET, Key="corpus/python/library/glob.html",
                 Body=(SAMPLES / "python/library/glob.html").read_bytes())
    before = {j["jid"] for j in flink.jobs()}
    victim = flink.pids["taskmanager-2"]
    killed = []

    def kill_a_task_manager():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not killed:
            running = [j for j in flink.jobs() if j["jid"] not in before and j["state"] == "RUNNING"]
            if running and flink.sdk_workers():
                time.sleep(2.0)  # well inside the job: its tasks are deployed and processing
                os.kill(victim, 9)
                killed.append(victim)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_a_task_manager, daemon=True)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(Exception) as failure:
        run_index(flink_config(test_config, s3_server, flink), f"{bucket}/corpus", index, progress=False, log=quiet)
    killer.join(timeout=5)
    assert killed, "the job never ran with SDK workers up"
    assert not isinstance(failure.value, UnbalancedRun)
    assert "FAILED" in str(failure.value), failure.value
    job = [j for j in flink.jobs() if j["jid"] not in before][-1]
    assert job["state"] == "FAILED", job
    assert publish.current_version(index) == live
    print(f"\nkilled task manager: the run failed after {time.monotonic() - t0:.0f} s")
