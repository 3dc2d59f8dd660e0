"""Nightly incremental re-index on the real S3 server, and real kills at several stages."""
import json
import os
from pathlib import Path
import subprocess
import sys

import pytest

from pipelines.index import run_index
from transforms.index import publish
from transforms.index.shards import read_table

TINY = ["man/man3/fnmatch.3", "man/man3/globfree.3", "nodejs/api/punycode.md", "git/git-version.txt",
        "records/faq.jsonl"]
RUN_COLUMNS = {"indexed_at"}


def table(index_dir, name, drop=RUN_COLUMNS):
    t = read_table(publish.resolve_index(str(index_dir)), name)
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def s3_config(cfg, s3):
    return cfg.model_copy(update={"s3": cfg.s3.model_copy(update={
        "endpoint_url": s3.endpoint_url, "region": s3.region,
        "access_key_id": s3.access_key, "secret_access_key": s3.secret_key})})


def quiet(*_):
    pass


def test_nightly_run_processes_only_what_changed(s3_server, test_config, tmp_path):
    from tests.conftest import SAMPLES
    cfg = s3_config(test_config, s3_server)
    c = s3_server.client()
    c.create_bucket(Bucket="nightly")
    for rel in TINY:
        c.upload_file(str(SAMPLES / rel), "nightly", f"docs/{rel}")
    index_dir = tmp_path / "index"
    first = run_index(cfg, "s3://nightly/docs", str(index_dir), progress=False, log=quiet)
    assert first["balanced"] and first["added"] == len(TINY)

    # one changed, one deleted, one added, one copied to a new path
    changed = (SAMPLES / "nodejs/api/punycode.md").read_text() + "\n\n## Added tonight\n\nA new paragraph.\n"
    c.put_object(Bucket="nightly", Key="docs/nodejs/api/punycode.md", Body=changed.encode())
    c.delete_object(Bucket="nightly", Key="docs/git/git-version.txt")
    c.upload_file(str(SAMPLES / "man/man1/ldd.1"), "nightly", "docs/man/man1/ldd.1")
    c.upload_file(str(SAMPLES / "man/man3/fnmatch.3"), "nightly", "docs/zz-copy/fnmatch.3")

    second = run_index(cfg, "s3://nightly/docs", str(index_dir), progress=False, log=quiet)
    assert second["balanced"], second
    assert (second["added"], second["changed"], second["removed"]) == (2, 1, 1)
    assert second["read"] == 3  # punycode.md, ldd.1, the copy: nothing else was fetched
    assert second["parsed"] == 2  # the changed and the new document; the copy is carried
    assert second["carried_read"] == 1
    assert second["carried_documents"] > 0
    assert second["embedded"] < second["chunks"]  # unchanged chunks of punycode.md came from the cache
    assert second["cache_hits"] > 0

    # the same state indexed from scratch, into another index dir (no cache)
    scratch = run_index(cfg, "s3://nightly/docs", str(tmp_path / "scratch"), progress=False, log=quiet)
    assert scratch["embedded"] == scratch["chunks"]
    for name in ("chunks", "documents", "dead_letters"):
        assert table(index_dir, name) == table(tmp_path / "scratch", name), name
    sources = {r["uri"]: r for r in table(index_dir, "sources")}
    assert sources["s3://nightly/docs/git/git-version.txt"]["status"] == "tombstoned"
    assert sources["s3://nightly/docs/git/git-version.txt"]["tombstoned_at"]
    docs = table(index_dir, "documents")
    fnmatch = [d for d in docs if d["key"] == "man/man3/fnmatch.3"][0]
    assert fnmatch["source_uris"] == ["s3://nightly/docs/man/man3/fnmatch.3", "s3://nightly/docs/zz-copy/fnmatch.3"]

    # nothing changed: nothing is read, parsed or embedded
    third = run_index(cfg, "s3://nightly/docs", str(index_dir), progress=False, log=quiet)
    assert (third["read"], third["parsed"], third["embedded"]) == (0, 0, 0)
    assert table(index_dir, "chunks") == table(tmp_path / "scratch", "chunks")


def test_dry_run_changes_nothing(mini_corpus, tmp_path):
    from tests.conftest import copy_corpus
    src = copy_corpus(tmp_path / "src", TINY)
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "index", "--input", str(src), "--output",
                          str(tmp_path / "idx"), "--dry-run"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "would add 5" in out.stdout
    assert not (tmp_path / "idx" / "CURRENT").exists()


def _index_cmd(src, index_dir, kill_at=None):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("RAGBEAM_FAULT_KILL_AT", None)
    if kill_at:
        env["RAGBEAM_FAULT_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "index", "--quiet", "--input", str(src),
                           "--output", str(index_dir)], capture_output=True, text=True, env=env, timeout=600)


def test_killed_runs_leave_the_live_version_answering(tmp_path, test_config):
    from tests.conftest import copy_corpus
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question

    src = copy_corpus(tmp_path / "src", TINY[:3])
    index_dir = tmp_path / "index"
    assert _index_cmd(src, index_dir).returncode == 0
    live = publish.current_version(str(index_dir))
    copy_corpus(src, ["records/faq.jsonl", "git/git-version.txt"])  # tonight's new documents

    from transforms.ingest.embed import Embedder, model_spec_from_config
    spec = model_spec_from_config(test_config)
    embedder = Embedder(spec)
    # in the pipeline, and after the new segments are built (INDEX/segments/ holds them, no version
    # lists them); a kill between the two (after_pipeline) fails the same way and costs a run more
    for stage in ("during_embed", "after_artifact"):
        run = _index_cmd(src, index_dir, kill_at=stage)
        assert run.returncode == -9, (stage, run.returncode, run.stderr[-2000:])
        assert publish.current_version(str(index_dir)) == live, stage
        engine = QAEngine(publish.resolve_index(str(index_dir)), test_config, spec, embedder=embedder)
        (rec,) = engine.answer_batch([Question("q", "What does fnmatch match?")], top_k=3)
        engine.close()
        assert rec.status == "answered" and rec.index_version == live

    run = _index_cmd(src, index_dir, kill_at="after_publish")  # published, cache not yet committed
    assert run.returncode == -9
    assert publish.current_version(str(index_dir)) != live
    killed_version = publish.current_version(str(index_dir))
    cache = Path(index_dir, "cache", "embeddings")
    cached = lambda: {p.stem.rsplit("-", 1)[0] for p in cache.rglob("*.arrow")}  # noqa: E731
    assert killed_version not in cached()
    assert _index_cmd(src, index_dir).returncode == 0
    assert killed_version in cached()  # the killed run's published vectors joined the cache

    reference = tmp_path / "reference"
    assert _index_cmd(src, reference).returncode == 0
    for name in ("chunks", "documents", "dead_letters"):
        assert table(index_dir, name, drop={"indexed_at", "mtime"}) == \
            table(reference, name, drop={"indexed_at", "mtime"}), name


def test_carried_chunks_are_the_live_rows_with_their_new_paths(tmp_path, test_config):
    """The new version's carried chunks are exactly the live rows of the unchanged documents:
    every column equal (vectors bit for bit), only source_uris moved (a copy of fnmatch.3 appeared
    tonight); the shards it wrote for them have the schema chunk_schema(dim) as written by pyarrow,
    and the others are the live version's shards, listed again."""
    import shutil

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import copy_corpus
    from transforms.index import shard_store
    from transforms.records import chunk_schema, embedding_dim

    src = copy_corpus(tmp_path / "src", TINY)
    index_dir = tmp_path / "index"
    assert run_index(test_config, str(src), str(index_dir), progress=False, log=quiet)["balanced"]
    live = read_table(publish.resolve_index(str(index_dir)), "chunks").sort_by("chunk_id")
    first = json.load(open(os.path.join(publish.resolve_index(str(index_dir)), "manifest.json")))
    changed = src / "nodejs/api/punycode.md"
    changed.write_text(changed.read_text() + "\n\n## Added tonight\n\nA new paragraph.\n")
    (src / "zz-copy").mkdir()
    shutil.copyfile(src / "man/man3/fnmatch.3", src / "zz-copy/fnmatch.3")
    second = run_index(test_config, str(src), str(index_dir), progress=False, log=quiet)
    assert second["balanced"], second

    vdir = publish.resolve_index(str(index_dir))
    now = read_table(vdir, "chunks").sort_by("chunk_id")
    keep = lambda t: pa.array([not u.endswith("punycode.md") for u in t.column("source_uri").to_pylist()])  # noqa: E731
    carried, expected = now.filter(keep(now)), live.filter(keep(live))
    assert second["carried_chunks"] == carried.num_rows == expected.num_rows > 0
    assert carried.column("chunk_id").to_pylist() == expected.column("chunk_id").to_pylist()
    bits = lambda t: np.asarray(t.column("embedding").combine_chunks().flatten()).view(np.uint32)  # noqa: E731
    assert np.array_equal(bits(carried), bits(expected))
    assert carried.drop_columns(["source_uris"]).equals(expected.drop_columns(["source_uris"]))
    for row, uris in zip(expected.select(["source_uri", "source_uris"]).to_pylist(),
                         carried.column("source_uris").to_pylist()):
        copies = [row["source_uri"].replace("man/man3/fnmatch.3", "zz-copy/fnmatch.3")] \
            if row["source_uri"].endswith("man/man3/fnmatch.3") else []
        assert uris == sorted(row["source_uris"] + copies), row
    assert any(len(u) == 2 for u in carried.column("source_uris").to_pylist())
    # the shards written tonight: the changed file's and the moved rows, in chunk_schema(dim)
    dim = embedding_dim(live.schema)
    pq.write_table(pa.Table.from_pylist([], chunk_schema(dim)), tmp_path / "empty.parquet")
    listed = shard_store.table_shards(vdir, "chunks")
    before = {e["name"] for e in first["tables"]["chunks"]["shards"]}
    new = [e.name for e in listed.entries if e.name not in before]
    assert new and len(new) == second["shards"]["chunks"]["written"]
    for name in new:
        path = shard_store.shard_uri(str(index_dir), "chunks", name)
        assert pq.read_schema(path).equals(pq.read_schema(tmp_path / "empty.parquet")), name


def test_a_parquet_cache_of_an_earlier_version_is_rewritten_and_hit(tmp_path, test_config):
    """A cache written before .arrow files (Parquet, no key_h64) is rewritten by the next run
    before its pipeline starts, and the unchanged chunks of a changed file come from it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.conftest import copy_corpus
    from transforms.ingest.embed_cache import KEY_HASH

    src = copy_corpus(tmp_path / "src", TINY)
    index_dir = tmp_path / "index"
    assert run_index(test_config, str(src), str(index_dir), progress=False, log=quiet)["balanced"]
    arrows = sorted(Path(index_dir, "cache", "embeddings").rglob("*.arrow"))
    assert arrows
    for p in arrows:  # as an earlier version left them
        with pa.memory_map(str(p), "r") as source:
            t = pa.ipc.open_file(source).read_all().drop_columns([KEY_HASH])
        pq.write_table(t, p.with_suffix(".parquet"))
        p.unlink()
    changed = src / "nodejs/api/punycode.md"
    changed.write_text(changed.read_text() + "\n\n## Added tonight\n\nA new paragraph.\n")
    logs = []
    second = run_index(test_config, str(src), str(index_dir), progress=False, log=logs.append)
    assert second["balanced"] and second["cache_hits"] > 0 and second["embedded"] < second["chunks"]
    assert any(f"rewrote {len(arrows)} embedding cache file(s)" in line for line in logs), logs
    assert not list(Path(index_dir, "cache").rglob("*.parquet"))
    assert {p.stem for p in arrows} < {p.stem for p in Path(index_dir, "cache", "embeddings").rglob("*.arrow")}


def _records(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "title": i, "text": t}) + "\n" for i, t in records))


def _state(index_dir):
    """What a version answers from, run-independent: documents, chunks, near-duplicates."""
    docs = {(d["doc_id"], tuple(sorted(d["source_uris"]))) for d in table(index_dir, "documents")}
    chunks = {(c["chunk_id"], c["text"], tuple(sorted(c["source_uris"]))) for c in table(index_dir, "chunks")}
    near = {(r["member"], r["representative"]) for r in table(index_dir, "near_duplicates")}
    sigs = {(s["doc_id"], s["representative"]) for s in table(index_dir, "signatures")}
    return docs, chunks, near, sigs


def test_a_file_re_read_for_a_near_duplicate_member_redoes_that_member_alone(tmp_path, test_config):
    """A near-duplicate member whose representative changed is checked again, and its file is
    read for it; the file's other documents keep their live rows (never chunked or embedded
    again), and the version equals a fresh index of the same files."""
    import random

    from tests.planted_corpus import _Gen
    gen = _Gen(11)
    rep, edited, *others = (gen.body(220, 260) for _ in range(18))
    words = rep.split(" ")
    words[random.Random(3).randrange(10, len(words) - 10)] = "zebrafinch"
    cfg = test_config.model_copy(update={"artifacts": test_config.artifacts.model_copy(update={"build": False})})
    corpus, index, fresh = tmp_path / "corpus", tmp_path / "index", tmp_path / "fresh"
    files = {"a/one.jsonl": [("r1", rep)] + [(f"x{i}", t) for i, t in enumerate(others[:4])],
             "b/two.jsonl": [("m1", " ".join(words))] + [(f"p{i}", t) for i, t in enumerate(others[4:8])],
             "c/three.jsonl": [(f"q{i}", t) for i, t in enumerate(others[8:])]}
    for rel, recs in files.items():
        _records(corpus / rel, recs)
    first = run_index(cfg, str(corpus), str(index), progress=False, log=quiet)
    assert first["balanced"] and first["near_duplicates"] == 1, first
    [row] = table(index, "near_duplicates")
    member_file = next(f for f in files if row["member_source_uris"][0].endswith(f))
    rep_file = next(f for f in files if f != member_file and any(i in ("r1", "m1") for i, _ in files[f]))
    title = {d["doc_id"]: d["title"] for d in table(index, "documents")}
    rep_title = title[row["representative"]]

    def signature_shards():
        with open(os.path.join(publish.resolve_index(str(index)), "manifest.json")) as f:
            return {e["name"]: e["rows"] for e in json.load(f)["tables"]["signatures"]["shards"]}
    before = signature_shards()

    # the representative's text changes beyond the threshold: its member must be checked again
    _records(corpus / rep_file, [(i, edited if i == rep_title else t) for i, t in files[rep_file]])
    night = run_index(cfg, str(corpus), str(index), progress=False, log=quiet)
    assert night["balanced"], night
    assert night["read"] == 2  # the changed file, and the member's file for its member
    assert night.get("kept_documents") == 4  # the member file's other four: their rows stay, nothing is redone
    assert night["documents"] == 6 and night["near_duplicates"] == 0  # the changed file's 5, the member alone
    # the signatures are shared shards: the live ones listed again, only the re-signed rows written
    after = signature_shards()
    assert set(before) <= set(after) and sum(n for s, n in after.items() if s not in before) == 6
    full = run_index(cfg, str(corpus), str(fresh), progress=False, log=quiet)
    assert full["balanced"] and full["documents"] == 18
    assert _state(index) == _state(fresh)
    # the kept documents' chunks are the first run's rows, not re-made ones
    at = {}
    for c in read_table(publish.resolve_index(str(index)), "chunks", ["doc_id", "indexed_at"]).to_pylist():
        at.setdefault(c["doc_id"], set()).add(c["indexed_at"])
    title = {d["doc_id"]: d["title"] for d in table(index, "documents")}
    kept_titles = {i for i, _ in files[member_file]} - {"r1", "m1"}
    kept = {t for d, ti in title.items() if ti in kept_titles for t in at[d]}
    redone = {t for d, ti in title.items() if ti in {i for i, _ in files[rep_file]} | {"r1", "m1"} for t in at[d]}
    assert len(kept_titles) == 4 and len(kept) == 1 and len(redone) == 1 and kept != redone
