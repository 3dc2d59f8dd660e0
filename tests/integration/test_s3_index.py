"""The index directory on object storage (the real SeaweedFS server): layout, publish, nightly
runs, pruning, the leased writer lock, real kills, and the answer job reading from it."""
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from pipelines.index import run_index
from transforms.common import storage
from transforms.index import publish
from transforms.index.incremental import mirror_version
from transforms.index.shards import read_table
from tests.integration.test_incremental import TINY, s3_config, quiet

RUN_COLUMNS = {"indexed_at"}


def rows(version_dir, name, drop=RUN_COLUMNS):
    t = read_table(version_dir, name)
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def local_copy(index_uri, tmp_path, tag):
    return mirror_version(publish.resolve_index(index_uri), str(tmp_path / f"mirror-{tag}"))


def keys(s3_server, bucket, prefix):
    c = s3_server.client()
    out = []
    for page in c.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(out)


@pytest.fixture(scope="module")
def s3_source(s3_server):
    from tests.conftest import SAMPLES
    c = s3_server.client()
    try:
        c.create_bucket(Bucket="s3index")
    except Exception:
        pass
    for rel in TINY:
        c.upload_file(str(SAMPLES / rel), "s3index", f"docs/{rel}")
    return "s3://s3index/docs"


def test_index_on_s3_publishes_nightly_runs_and_prunes(s3_server, s3_source, test_config, tmp_path, monkeypatch):
    from tests.conftest import SAMPLES
    monkeypatch.setenv("RAGBEAM_INDEX_CACHE_DIR", str(tmp_path / "host-cache"))
    cfg = s3_config(test_config, s3_server)
    cfg = cfg.model_copy(update={"index": cfg.index.model_copy(update={"keep_versions": 1})})
    c = s3_server.client()
    for rel in TINY:
        c.upload_file(str(SAMPLES / rel), "s3index", f"night0/{rel}")
    index2 = "s3://s3index/idx-nightly"
    first = run_index(cfg, "s3://s3index/night0", index2, progress=False, log=quiet)
    assert first["balanced"] and first["added"] == len(TINY)
    v1 = publish.current_version(index2)
    assert v1 == first["version"]
    names = keys(s3_server, "s3index", "idx-nightly/")
    assert "idx-nightly/CURRENT" in names and "idx-nightly/.lock" not in names  # released
    assert not [k for k in names if k.startswith("idx-nightly/staging/")]
    vkeys = [k[len(f"idx-nightly/versions/{v1}/"):] for k in names if k.startswith(f"idx-nightly/versions/{v1}/")]
    for expected in ("manifest.json", "summary.json", "sources/sources.parquet"):
        assert expected in vkeys, (expected, vkeys)
    assert not any(k.startswith(("chunks/", "documents/", "dead_letters/")) for k in vkeys)  # in shards/
    assert not any(k.startswith(("_plan/", "sources_read/", "embeddings_new/")) or "_temporary" in k for k in vkeys)
    # the version's shards are shared objects under shards/<table>/<sha256>.parquet, each with its summary
    m1 = json.loads(storage.read_text(f"{index2}/versions/{v1}/manifest.json"))
    shard_keys = set(keys(s3_server, "s3index", "idx-nightly/shards/"))
    for table in ("chunks", "documents", "dead_letters"):
        for e in m1["tables"][table]["shards"]:
            assert f"idx-nightly/shards/{table}/{e['name']}.parquet" in shard_keys
            assert f"idx-nightly/shards/{table}/{e['name']}.keys.parquet" in shard_keys
    assert not [k for k in shard_keys if "/_temporary" in k]
    # the cache got the new vectors, named after their (published) version
    cache = [k for k in names if k.startswith("idx-nightly/cache/embeddings/")]
    assert cache and all(os.path.basename(k).startswith(v1) for k in cache)
    # the manifest lists the segments the workers uploaded, each with its segment.json's sha256
    mirror = local_copy(index2, tmp_path, "1")
    manifest = json.loads(open(os.path.join(mirror, "manifest.json")).read())
    for seg in manifest["segments"]:
        meta = storage.read_bytes(f"{index2}/segments/{seg['id']}/segment.json")
        assert hashlib.sha256(meta).hexdigest() == seg["meta_sha256"]
        assert any(k.startswith(f"idx-nightly/segments/{seg['id']}/vectors.npy") for k in names)

    # tonight: one changed, one deleted, one added, one copied to a new path
    changed = (SAMPLES / "nodejs/api/punycode.md").read_text() + "\n\n## Added tonight\n\nA new paragraph.\n"
    c.put_object(Bucket="s3index", Key="night0/nodejs/api/punycode.md", Body=changed.encode())
    c.delete_object(Bucket="s3index", Key="night0/git/git-version.txt")
    c.upload_file(str(SAMPLES / "man/man1/ldd.1"), "s3index", "night0/man/man1/ldd.1")
    c.upload_file(str(SAMPLES / "man/man3/fnmatch.3"), "s3index", "night0/zz-copy/fnmatch.3")
    second = run_index(cfg, "s3://s3index/night0", index2, progress=False, log=quiet)
    assert second["balanced"], second
    assert (second["added"], second["changed"], second["removed"]) == (2, 1, 1)
    assert second["read"] == 3 and second["parsed"] == 2 and second["carried_read"] == 1
    assert second["carried_documents"] > 0 and second["cache_hits"] > 0
    assert second["embedded"] < second["chunks"]
    assert second["pruned"] and publish.list_versions(index2) == [second["version"]]  # keep_versions: 1
    # tonight wrote new shard objects only: every shard v1 listed that v2 lists is the same object,
    # and the shards on S3 are exactly those v2 lists (pruning dropped what only v1 listed)
    m2 = json.loads(storage.read_text(f"{index2}/versions/{second['version']}/manifest.json"))
    for table in ("chunks", "documents", "dead_letters"):
        before = {e["name"] for e in m1["tables"][table]["shards"]}
        now = {e["name"] for e in m2["tables"][table]["shards"]}
        assert len(now - before) <= second["shards"][table]["written"], table
        present = {k.rsplit("/", 1)[-1].split(".", 1)[0] for k in keys(s3_server, "s3index", f"idx-nightly/shards/{table}/")}
        assert present == now, table
    assert {e["name"] for e in m1["tables"]["documents"]["shards"]} & \
        {e["name"] for e in m2["tables"]["documents"]["shards"]}  # listed again, not rewritten
    # the segments on S3 are exactly the live version's: pruning dropped those only v1 listed
    man2 = json.loads(storage.read_text(f"{index2}/versions/{second['version']}/manifest.json"))
    listed = {x["id"] for x in man2["segments"]}
    present = {k.split("/")[2] for k in keys(s3_server, "s3index", "idx-nightly/segments/")}
    assert present == listed
    # the driver fetched key summaries, vocabularies, lengths and postings of the live segments
    # (ids only of those it merges), never their vectors, sentences or text
    fetched = {p.name for p in (tmp_path / "host-cache" / "segment_parts").rglob("*")
               if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".lock")}
    assert "keys.arrow" in fetched and fetched <= {"segment.json", "keys.arrow", "ids.arrow", "terms.arrow",
                                                   "doc_len.npy", "post_ptr.npy", "post_doc.npy"}, fetched

    # the same state indexed from scratch into a local index: same rows
    scratch = run_index(cfg, "s3://s3index/night0", str(tmp_path / "scratch"), progress=False, log=quiet)
    m2 = local_copy(index2, tmp_path, "2")
    local = publish.resolve_index(str(tmp_path / "scratch"))
    for name in ("chunks", "documents", "dead_letters"):
        assert rows(m2, name) == rows(local, name), name
    sources = {r["uri"]: r for r in rows(m2, "sources")}
    assert sources["s3://s3index/night0/git/git-version.txt"]["status"] == "tombstoned"
    assert scratch["embedded"] == scratch["chunks"]

    # nothing changed: nothing read, parsed or embedded
    third = run_index(cfg, "s3://s3index/night0", index2, progress=False, log=quiet)
    assert (third["read"], third["parsed"], third["embedded"]) == (0, 0, 0)
    # and every segment is listed again by id with the same tombstones: nothing built
    m3 = json.loads(storage.read_text(f"{index2}/versions/{third['version']}/manifest.json"))
    assert m3["segments"] == man2["segments"]  # the same segments by id, the same tombstones


# --- the leased writer lock ------------------------------------------------------------

def _lock_env(s3_server, **extra):
    env = {**os.environ, "PYTHONPATH": os.getcwd(), **s3_server.env(),
           "RAGBEAM__S3__ENDPOINT_URL": s3_server.endpoint_url, "RAGBEAM__S3__REGION": s3_server.region,
           "RAGBEAM__S3__ACCESS_KEY_ID": s3_server.access_key,
           "RAGBEAM__S3__SECRET_ACCESS_KEY": s3_server.secret_key, **extra}
    env.pop("RAGBEAM_FAULT_KILL_AT", None)
    return env


def test_one_writer_per_s3_index_and_a_killed_runs_lock_expires(s3_server, s3_source, monkeypatch):
    for k, v in _lock_env(s3_server).items():
        if k.startswith(("RAGBEAM__S3__", "AWS_")):
            monkeypatch.setenv(k, v)
    index = "s3://s3index/idx-lock"
    storage.exists(index + "/.lock")  # a warm client: the checks below fall well within the lease
    # a run that takes the lock (lease 6 s) and is killed -9 while holding it
    code = ("import os, signal; from transforms.index import publish\n"
            f"cm = publish.index_lock({index!r}, lease_s=6.0); cm.__enter__(); print('held', flush=True)\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    run = subprocess.run([sys.executable, "-c", code], env=_lock_env(s3_server), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == -9 and "held" in run.stdout, run.stderr[-2000:]
    with pytest.raises(publish.IndexBusyError, match="being indexed by another run.*held by"):
        with publish.index_lock(index, lease_s=2.0):
            pass
    time.sleep(6.5)  # the killed run's lease runs out: the next run takes the lock over
    with publish.index_lock(index, lease_s=1.0) as lease:
        time.sleep(2.5)  # longer than the lease: the heartbeat keeps renewing it
        with pytest.raises(publish.IndexBusyError):
            with publish.index_lock(index, lease_s=1.0):
                pass
        lease.check()
    assert storage.read_with_etag(index + "/.lock") is None  # released
    with publish.index_lock(index):
        pass


# --- real kills of the index job on S3, and the answer job from an S3 index ---------------

def _cli(args, s3_server, kill_at=None, **extra):
    env = _lock_env(s3_server, **extra)
    if kill_at:
        env["RAGBEAM_FAULT_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True,
                          env=env, timeout=900)


def test_killed_index_runs_on_s3_leave_the_live_version_and_a_rerun_equals_an_uninterrupted_one(
        s3_server, s3_source, test_config, tmp_path):
    index = "s3://s3index/idx-kill"
    src = s3_source
    for stage in ("during_embed", "during_segment_upload", "before_current"):
        run = _cli(["index", "--quiet", "--input", src, "--output", index], s3_server, kill_at=stage,
                   RAGBEAM_INDEX_LOCK_LEASE_S="3")
        assert run.returncode == -9, (stage, run.returncode, run.stderr[-3000:])
        assert publish.current_version(index) is None, stage  # nothing was published
        time.sleep(3.5)  # the killed run's lock lease runs out
    done = _cli(["index", "--quiet", "--input", src, "--output", index], s3_server)
    assert done.returncode == 0, done.stderr[-3000:]
    assert publish.current_version(index) is not None
    assert not keys(s3_server, "s3index", "idx-kill/staging/")

    reference = run_index(s3_config(test_config, s3_server), src, str(tmp_path / "reference"), progress=False,
                          log=quiet)
    mirror = local_copy(index, tmp_path, "kill")
    local = publish.resolve_index(str(tmp_path / "reference"))
    assert reference["chunks"] > 0
    for name in ("chunks", "documents", "dead_letters"):
        assert rows(mirror, name, drop={"indexed_at", "mtime"}) == rows(local, name, drop={"indexed_at", "mtime"}), name


@pytest.fixture(scope="module")
def s3_index(s3_server, s3_source, test_config):
    index = "s3://s3index/idx-answer"
    run_index(s3_config(test_config, s3_server), s3_source, index, progress=False, log=quiet)
    return index


def test_answer_job_from_an_s3_index_to_s3_resumes_after_a_kill(s3_server, s3_index, tmp_path):
    """Everything on S3: the artifact is cached per version + sha256, a killed run resumes from the
    shards already in the bucket, and the output equals an uninterrupted run's."""
    from tests.integration.test_answer_job import KNOWN
    index = s3_index
    c = s3_server.client()
    c.put_object(Bucket="s3index", Key="q/questions.jsonl", Body="".join(
        json.dumps({"id": f"q{i:03d}", "question": q}) + "\n" for i, q in enumerate([q for q, _ in KNOWN] * 3)).encode())
    cache = tmp_path / "index-cache"
    ans = lambda out, **kw: _cli(["answer", "--quiet", "--index", index, "--questions",  # noqa: E731
                                  "s3://s3index/q/questions.jsonl", "--output", out], s3_server,
                                 RAGBEAM_INDEX_CACHE_DIR=str(cache), RAGBEAM__OUTPUT__SHARDS="8", **kw)
    whole = ans("s3://s3index/answers/whole.jsonl")
    assert whole.returncode == 0, whole.stderr[-3000:]
    version = publish.current_version(index)
    listed = json.loads(storage.read_text(f"{index}/versions/{version}/manifest.json"))["segments"]
    for seg in listed:  # each segment copied once into the host cache by id, verified
        assert (cache / "segments" / seg["id"] / ".verified").exists()
        assert (cache / "segments" / seg["id"] / "vectors.npy").exists()
    killed = ans("s3://s3index/answers/resumed.jsonl", kill_at="after_shard:2", RAGBEAM_INDEX_LOCK_LEASE_S="5")
    assert killed.returncode == -9, killed.stderr[-3000:]
    from transforms.common.lock import BusyError, exclusive_lock
    with pytest.raises(BusyError, match="being written by another run"):  # its output lock is still leased
        with exclusive_lock("s3://s3index/answers/resumed.jsonl.lock", "s3://s3index/answers/resumed.jsonl"):
            pass
    time.sleep(5.5)  # the killed run's lock lease runs out
    assert not storage.exists("s3://s3index/answers/resumed.jsonl")
    assert len([k for k in keys(s3_server, "s3index", "answers/resumed.jsonl.parts/") if "/shard-" in k]) == 2
    again = ans("s3://s3index/answers/resumed.jsonl")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "2/8 shards already written" in again.stdout
    assert storage.read_bytes("s3://s3index/answers/resumed.jsonl") == \
        storage.read_bytes("s3://s3index/answers/whole.jsonl")
    lines = storage.read_text("s3://s3index/answers/whole.jsonl").splitlines()
    assert len(lines) == 3 * len(KNOWN) and any(json.loads(x)["status"] == "answered" for x in lines)


# --- question files read in pieces, answer shards sized by question count -----------------

def test_question_files_read_in_pieces_equal_a_whole_read(s3_server, s3_source, tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from dataclasses import asdict

    from transforms.query.records import Question
    from transforms.query.questions.file import describe_question_file
    from transforms.query.questions.pieces import plan_pieces, read_piece, shards_for
    from transforms.query.questions.read import read_questions
    for k, v in _lock_env(s3_server).items():
        if k.startswith("RAGBEAM__S3__"):
            monkeypatch.setenv(k, v)
    lines = []
    for i in range(3000):
        if i % 97 == 0:
            lines.append("not json")
        elif i % 55 == 0:
            lines.append("")
        else:
            lines.append(json.dumps({"id": f"q{i}", "question": f"what is é{i}?" * (i % 7 + 1)}))
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text("\r\n".join(lines[:1000]) + "\n" + "\n".join(lines[1000:]))  # mixed line ends
    parquet = tmp_path / "q.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": f"q{i}", "question": f"x{i}"} for i in range(2500)]), parquet,
                   row_group_size=700)
    c = s3_server.client()
    c.upload_file(str(jsonl), "s3index", "pieces/q.jsonl")
    c.upload_file(str(parquet), "s3index", "pieces/q.parquet")

    def norm(r):
        return (r.id, r.line, r.question) if isinstance(r, Question) else json.dumps(asdict(r), sort_keys=True)
    for uri, n_pieces in ((str(jsonl), 62), ("s3://s3index/pieces/q.jsonl", 62), (str(parquet), 4),
                          ("s3://s3index/pieces/q.parquet", 4)):
        whole = [norm(r) for r in read_questions(uri)]
        pieces, n = plan_pieces(describe_question_file(uri), piece_bytes=5000)
        assert len(pieces) == n_pieces, uri
        assert [norm(r) for p in pieces for r in read_piece(p)] == whole, uri
        assert n == (3000 if uri.endswith("jsonl") else 2500)
    assert shards_for(25_000, 10_000) == 3 and shards_for(3, 10_000) == 1 and shards_for(3, 10_000, 8) == 8
