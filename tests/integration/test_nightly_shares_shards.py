"""A nightly in proportion to the change: the new version lists the unchanged Parquet shards again
by name (shared, content-addressed, never rewritten), records the rows that left them as deletions,
writes only new shards, and answers as a fresh index of the same corpus; pruning never removes a
shard a kept version lists; a full build reads each shard a bounded number of times, whatever the
number of segments."""
from __future__ import annotations

import collections
import json
import os
import shutil

import pytest

from pipelines.index import run_index
from tests.conftest import copy_corpus
from transforms.index import publish, shard_store
from transforms.index.shards import read_table

TINY = ["man/man3/fnmatch.3", "man/man3/globfree.3", "nodejs/api/punycode.md", "git/git-version.txt",
        "records/faq.jsonl"]
QUESTIONS = ["What does fnmatch match?", "what does punycode convert", "how do I print the version of git",
             "free the memory of a glob result", "A new paragraph about tonight"]


def quiet(*_):
    pass


def manifest(index_dir) -> dict:
    with open(os.path.join(publish.resolve_index(str(index_dir)), "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def names(m: dict, table: str) -> list[str]:
    return [e["name"] for e in m["tables"][table]["shards"]]


def files(index_dir) -> dict[str, tuple]:
    """Every file of the shared store: (size, mtime_ns, inode)."""
    out = {}
    for d, _, fs in os.walk(os.path.join(index_dir, shard_store.SHARDS_DIR)):
        for f in fs:
            st = os.stat(os.path.join(d, f))
            out[os.path.relpath(os.path.join(d, f), index_dir)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def rows(index_dir, table, drop=("indexed_at",)):
    t = read_table(publish.resolve_index(str(index_dir)), table)
    t = t.select([c for c in t.column_names if c not in drop])
    return sorted(t.to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str))


def answers(index_dir, cfg):
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    engine = QAEngine(publish.resolve_index(str(index_dir)), cfg, model_spec_from_config(cfg))
    try:
        recs = [r.to_row() for r in engine.run([Question(f"q{i}", q) for i, q in enumerate(QUESTIONS)], 10)]
    finally:
        engine.close()
    # exact ties between chunks of different segments follow segment order (docs/index-layout.md)
    return [(r["status"], r["answer"], sorted((round(x["score"], 6), x["chunk_id"]) for x in r["retrieved"]))
            for r in recs]


@pytest.fixture(scope="module")
def nightly(tmp_path_factory, test_config):
    """An index of the mini corpus, then tonight's change (one file changed, one removed, one
    copied to a new path) indexed into it, and the same corpus indexed from scratch."""
    root = tmp_path_factory.mktemp("nightly")
    src = copy_corpus(root / "src")
    idx = root / "idx"
    first = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    before = {"manifest": manifest(idx), "files": files(idx), "version": first["version"],
              "chunks": rows(idx, "chunks")}
    changed = src / "nodejs/api/punycode.md"
    changed.write_text(changed.read_text() + "\n\n## Added tonight\n\nA new paragraph about tonight.\n")
    (src / "git/git-version.txt").unlink()
    (src / "zz-copy").mkdir()
    shutil.copyfile(src / "man/man3/fnmatch.3", src / "zz-copy/fnmatch.3")
    second = run_index(test_config, str(src), str(idx), progress=False, log=quiet)
    fresh = root / "fresh"
    run_index(test_config, str(src), str(fresh), progress=False, log=quiet)
    return {"idx": idx, "fresh": fresh, "before": before, "second": second, "cfg": test_config, "src": src}


def test_the_nightly_lists_unchanged_shards_by_name_and_writes_only_new_ones(nightly):
    idx, before, second = nightly["idx"], nightly["before"], nightly["second"]
    assert second["balanced"] and (second["changed"], second["removed"]) == (1, 1), second
    m1, m2 = before["manifest"], manifest(idx)
    now = files(idx)
    for table in shard_store.SHARED_TABLES:
        kept = [n for n in names(m1, table) if n in names(m2, table)]
        assert kept, table  # the first run's shards are listed again by name
        for n in kept:  # the same files, never rewritten
            for rel in (f"shards/{table}/{n}.parquet", f"shards/{table}/{n}.keys.parquet"):
                assert now[rel] == before["files"][rel], rel
        new = [n for n in names(m2, table) if n not in names(m1, table)]
        assert len(new) <= second["shards"][table]["written"], table  # the run's own shards only
    # the only chunk shards written tonight: the changed file's rows and the copied file's rows
    # (its paths moved), nothing of the unchanged documents
    carried_rows = {r["chunk_id"] for r in before["chunks"]}
    root = os.path.join(str(idx), "shards", "chunks")
    import pyarrow.parquet as pq
    new_chunks = [n for n in names(m2, "chunks") if n not in names(m1, "chunks")]
    written = [r for n in new_chunks for r in pq.read_table(os.path.join(root, n + ".parquet")).to_pylist()]
    assert written and {r["source_uri"].rsplit("/", 1)[-1] for r in written} <= {"punycode.md", "fnmatch.3"}
    moved = [r for r in written if r["chunk_id"] in carried_rows]
    assert moved and all(len(r["source_uris"]) == 2 for r in moved)  # fnmatch.3 under two paths now
    # the rows that left are recorded, not copied around
    info = m2["tables"]["chunks"]
    assert info["deletions"] and sum(e["deleted"] for e in info["shards"]) > 0
    assert second["shards"]["chunks"]["deleted_rows"] > 0


def test_the_nightly_holds_the_rows_and_answers_of_a_fresh_index(nightly):
    idx, fresh, before = nightly["idx"], nightly["fresh"], nightly["before"]
    for table in ("chunks", "documents", "dead_letters"):
        assert rows(idx, table) == rows(fresh, table), table
    # the removed and changed documents' old chunks are gone from the rows and from the answers
    live = {r["chunk_id"] for r in rows(idx, "chunks")}
    gone = {r["chunk_id"] for r in before["chunks"]} - live
    assert gone and any(r["source_uri"].endswith("git-version.txt") for r in before["chunks"]
                        if r["chunk_id"] in gone)
    got, want = answers(idx, nightly["cfg"]), answers(fresh, nightly["cfg"])
    assert got == want
    assert not {c for _, _, hits in got for _, c in hits} & gone


def test_pruning_keeps_every_shard_a_kept_version_lists(nightly, tmp_path, test_config):
    from pipelines.segments import after_publish
    idx = tmp_path / "idx"
    shutil.copytree(nightly["idx"], idx)
    orphan = idx / "shards" / "chunks" / ("ab" * 16 + ".parquet")
    orphan.write_bytes(b"left by a killed run")
    foreign = idx / "shards" / "chunks" / "notes.txt"
    foreign.write_text("not the index's")
    old = nightly["before"]["version"]
    m2 = manifest(idx)
    out = after_publish(str(idx), 1, log=quiet)
    assert out["pruned"] == [old] and not out["warnings"]
    assert publish.list_versions(str(idx)) == [m2["version"]]
    for table in shard_store.SHARED_TABLES:
        for n in names(m2, table):  # every shard the live version lists survives, with its summary
            assert (idx / "shards" / table / f"{n}.parquet").exists(), (table, n)
            assert (idx / "shards" / table / f"{n}.keys.parquet").exists(), (table, n)
        listed = set(names(m2, table))
        present = {p.name.split(".", 1)[0] for p in (idx / "shards" / table).iterdir() if p.name != "notes.txt"}
        assert present == listed, table  # what only the pruned version listed is gone
    assert not orphan.exists() and foreign.exists()
    assert rows(idx, "chunks") == rows(nightly["idx"], "chunks")
    # a version kept (a lease, or keep_versions) keeps its shards even when the live one dropped them
    listed_segments = {s["id"] for s in m2["segments"]}
    assert {p.name for p in (idx / "segments").iterdir() if not p.name.startswith(".")} >= listed_segments


def test_a_full_build_reads_each_shard_a_bounded_number_of_times(tmp_path, test_config, monkeypatch):
    """Every shard is opened the same number of times in 1 segment and in many: the many-segment
    build cuts each shard by chunk_id range once instead of filtering it once per segment."""
    opens: collections.Counter = collections.Counter()
    real = shard_store.open_shard

    def counting(uri):  # by inode: a shard is summarized in staging, then moved into the store
        opens[os.stat(str(uri)).st_ino] += 1
        return real(uri)
    monkeypatch.setattr(shard_store, "open_shard", counting)
    src = copy_corpus(tmp_path / "src", TINY)
    per_build = {}
    for max_chunks in (100_000, 4):
        opens.clear()
        cfg = test_config.model_copy(update={"index": test_config.index.model_copy(
            update={"segment_max_chunks": max_chunks})})
        idx = tmp_path / f"idx-{max_chunks}"
        run_index(cfg, str(src), str(idx), progress=False, log=quiet)
        m = manifest(idx)
        inodes = [os.stat(idx / "shards" / "chunks" / f"{n}.parquet").st_ino for n in names(m, "chunks")]
        per_build[max_chunks] = (len(m["segments"]), sorted(opens[i] for i in inodes))
    (one, reads_one), (many, reads_many) = per_build[100_000], per_build[4]
    assert one == 1 and many >= 5
    # summarized when stored, its chunk ids read to plan, its rows read once to build
    assert reads_one == reads_many and max(reads_many) <= 3, per_build


def _as_written_before_shared_shards(index_dir) -> None:
    """Turn an index into what ragbeam wrote before the shared store and key summaries: the live
    version's shards back in its own folder, no `tables` in its manifest, no INDEX/shards/, and
    segments without keys.arrow."""
    import hashlib
    vdir = publish.resolve_index(str(index_dir))
    m = manifest(index_dir)
    for table in shard_store.SHARED_TABLES:
        os.makedirs(os.path.join(vdir, table))
        for i, e in enumerate(m["tables"][table]["shards"]):
            shutil.copyfile(shard_store.shard_uri(str(index_dir), table, e["name"]),
                            os.path.join(vdir, table, f"part-{i:05d}-of-{len(m['tables'][table]['shards']):05d}.parquet"))
    shutil.rmtree(os.path.join(index_dir, "shards"))
    del m["tables"]
    for s in m["segments"]:
        seg = os.path.join(index_dir, "segments", s["id"])
        meta = json.load(open(os.path.join(seg, "segment.json")))
        os.remove(os.path.join(seg, "keys.arrow"))
        meta["files"].pop("keys.arrow")
        with open(os.path.join(seg, "segment.json"), "w") as f:
            json.dump(meta, f, indent=1)
        s["meta_sha256"] = hashlib.sha256(open(os.path.join(seg, "segment.json"), "rb").read()).hexdigest()
    with open(os.path.join(vdir, "manifest.json"), "w") as f:
        json.dump(m, f)


def test_an_index_written_before_shared_shards_is_read_and_carried_over(tmp_path, test_config):
    src = copy_corpus(tmp_path / "src")
    idx = tmp_path / "idx"
    cfg = test_config.model_copy(update={"index": test_config.index.model_copy(update={"segment_max_chunks": 40})})
    run_index(cfg, str(src), str(idx), progress=False, log=quiet)
    want = rows(idx, "chunks")
    _as_written_before_shared_shards(idx)
    old = publish.resolve_index(str(idx))
    old_files = {os.path.join(t, f): os.stat(os.path.join(old, t, f)).st_mtime_ns
                 for t in shard_store.SHARED_TABLES for f in os.listdir(os.path.join(old, t))}
    assert rows(idx, "chunks") == want  # read from the version's own folder, as before
    changed = src / "nodejs/api/punycode.md"
    changed.write_text(changed.read_text() + "\n\n## Added tonight\n\nA new paragraph about tonight.\n")
    (src / "git/git-version.txt").unlink()
    second = run_index(cfg, str(src), str(idx), progress=False, log=quiet)
    assert second["balanced"] and second["artifact"]["reused"] >= 1, second
    assert manifest(idx)["tables"]  # the next version lists shared shards (the old ones, put into the store)
    assert {p: os.stat(os.path.join(old, p)).st_mtime_ns for p in old_files} == old_files  # untouched
    fresh = tmp_path / "fresh"
    run_index(cfg, str(src), str(fresh), progress=False, log=quiet)
    for table in ("chunks", "documents", "dead_letters"):
        assert rows(idx, table) == rows(fresh, table), table
    assert answers(idx, cfg) == answers(fresh, cfg)


def test_the_nightly_counts_tombstoned_terms_from_the_rows_as_the_postings_do(nightly):
    """The BM25 df of the rows tombstoned tonight is counted by analysing those rows again (only
    they are read), carried over from the live version's dead_df.npy: equal to a scan of the
    segment's postings."""
    import numpy as np
    from transforms.index.segment_stats import dead_df, read_dead_df
    from transforms.index.segments import Segment
    idx = nightly["idx"]
    vdir = publish.resolve_index(str(idx))
    m = manifest(idx)
    tombstoned = [s for s in m["segments"] if s["deleted"]]
    assert tombstoned
    for s in m["segments"]:
        seg = Segment(os.path.join(idx, "segments", s["id"]))
        dead = np.load(os.path.join(vdir, "segment_stats", s["id"], "dead.npy"))
        assert np.array_equal(read_dead_df(vdir, s["id"], int(seg.meta["terms"])), dead_df(seg, dead)), s["id"]


def test_a_segment_of_another_analysis_is_built_again_from_the_listed_shards(nightly, tmp_path):
    """A live segment analysed otherwise (here: one from before the analysis fingerprint) that
    holds tombstones: the next run builds its live rows again from the shared shards, the
    version's deletions applied, so each live row is in one segment once and the answers are a
    fresh index's."""
    import hashlib

    import numpy as np
    from transforms.index.segments import Segment
    idx = tmp_path / "idx"
    shutil.copytree(nightly["idx"], idx)
    m = manifest(idx)
    stale = next(s for s in m["segments"] if s["deleted"])
    meta_path = idx / "segments" / stale["id"] / "segment.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("analysis")
    meta_path.write_text(json.dumps(meta, indent=1))
    stale["meta_sha256"] = hashlib.sha256(meta_path.read_bytes()).hexdigest()
    with open(os.path.join(publish.resolve_index(str(idx)), "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(m, f)
    logs = []
    run_index(nightly["cfg"], str(nightly["src"]), str(idx), progress=False, log=logs.append)
    assert sum(stale["id"] in line and "another tokenizer" in line for line in logs) == 1, logs
    after, vdir = manifest(idx), publish.resolve_index(str(idx))
    assert stale["id"] not in {s["id"] for s in after["segments"]}
    held = []
    for s in after["segments"]:
        ids = Segment(os.path.join(idx, "segments", s["id"])).chunk_ids().to_pylist()
        dead = set(np.load(os.path.join(vdir, "segment_stats", s["id"], "dead.npy")).tolist())
        held += [c for i, c in enumerate(ids) if i not in dead]
    live = [r["chunk_id"] for r in rows(idx, "chunks")]
    assert sorted(held) == sorted(live) and sum(s["live"] for s in after["segments"]) == len(live)
    assert rows(idx, "chunks") == rows(nightly["fresh"], "chunks")
    assert answers(idx, nightly["cfg"]) == answers(nightly["fresh"], nightly["cfg"])
