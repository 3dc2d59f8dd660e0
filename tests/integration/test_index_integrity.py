"""An index stays whole across runs: corrupt segments are refused and rebuilt, build-artifacts
publishes a new version, readers pin theirs against pruning (on S3 too), nothing after the CURRENT
switch fails a run, entries no run wrote are reported and never deleted, and a damaged index file
is one line naming it (exit 2)."""
from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from pipelines.cli import main
from transforms.index import layout, publish
from transforms.index.segments import META_FILE, SegmentCorrupt, check_segment
from tests.unit.test_index_folder import _one_line

QUESTIONS = [("q1", "How do I find the version of git?"), ("q2", "What does fnmatch do?"),
             ("q3", "How do I serialize an object to JSON?")]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    """Each test its own host cache (verification markers live there)."""
    monkeypatch.setenv("RAGBEAM_INDEX_CACHE_DIR", str(tmp_path / "host-cache"))


def _copy(mini_index, tmp_path, name="idx"):
    d = tmp_path / name
    shutil.copytree(mini_index[0], d)
    return d


def _manifest(index_dir) -> dict:
    with open(os.path.join(publish.resolve_index(str(index_dir)), "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _segment_dirs(index_dir) -> list[str]:
    return [os.path.join(str(index_dir), "segments", s["id"]) for s in _manifest(index_dir)["segments"]]


def _flip(path: str, at: float = 0.5) -> None:
    """One byte changed in place, mtime put back (only the ctime tells)."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        pos = max(0, min(st.st_size - 1, int(st.st_size * at)))
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x01]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _questions(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text("".join(json.dumps({"id": i, "question": t}) + "\n" for i, t in QUESTIONS))
    return q


def _answer(index_dir, tmp_path, capsys, name="a.jsonl"):
    rc = main(["answer", "--index", str(index_dir), "--questions", str(_questions(tmp_path)),
               "--output", str(tmp_path / name), "--quiet"])
    return rc, capsys.readouterr()


def _answers(path) -> list[tuple]:
    return [(r["id"], r["status"], r["answer"]) for r in map(json.loads, open(path, encoding="utf-8"))]


def _cfg(test_config, **index):
    return test_config.model_copy(update={"index": test_config.index.model_copy(update={"keep_versions": 1, **index})})


# --- local segments verified against segment.json -------------------------------------------------

def test_every_segment_file_is_verified_and_a_changed_byte_is_named(mini_index, tmp_path):
    """Any file of a local segment with one byte changed (mtime put back) is refused by name,
    on first open and after the host verified it; unchanged, a later open hashes nothing."""
    import transforms.index.segments as segments
    idx = _copy(mini_index, tmp_path)
    seg = _segment_dirs(idx)[0]
    names = sorted(json.load(open(os.path.join(seg, META_FILE)))["files"])
    assert {"rows.arrow", "vectors.npy", "sent_vec.npy", "post_doc.npy", "terms.arrow"} <= set(names)
    check_segment(seg)  # hashed once: remembered for the process and the host
    hashed = []
    real = segments._sha256
    segments._sha256 = lambda p: hashed.append(p) or real(p)
    try:
        segments._VERIFIED.clear()  # a new process: the host marker alone
        check_segment(seg)
        assert hashed == []  # a stat per file, no hashing
        check_segment(seg, full=True)  # before a merge: always hashed whole
        assert len(hashed) == len(names)
    finally:
        segments._sha256 = real
    for name in names:
        d = tmp_path / f"c-{name}"
        shutil.copytree(seg, d)
        check_segment(str(d))  # verified (and remembered) while intact
        _flip(str(d / name))
        with pytest.raises(SegmentCorrupt) as e:
            check_segment(str(d))
        assert str(d / name) in str(e.value) and "ragbeam index" in str(e.value) and "\n" not in str(e.value)


def test_a_corrupt_segment_stops_the_answer_job_with_one_line(mini_index, tmp_path, capsys):
    idx = _copy(mini_index, tmp_path)
    rc, _ = _answer(idx, tmp_path, capsys, "before.jsonl")  # the host has verified it now
    assert rc == 0
    seg = _segment_dirs(idx)[0]
    _flip(os.path.join(seg, "rows.arrow"))
    rc, out = _answer(idx, tmp_path, capsys)
    assert rc == 2
    line = _one_line(out.err)
    assert "rows.arrow" in line and os.path.basename(seg) in line and "ragbeam index" in line
    assert not (tmp_path / "a.jsonl").exists()


def test_the_next_index_run_rebuilds_a_corrupt_segment(mini_index, mini_corpus, tmp_path, test_config, capsys):
    """One corrupt segment of three: the next run builds its rows again (the healthy ones
    reused) and answers as before; a single corrupt segment: rebuilt whole."""
    from pipelines.index import run_index
    from pipelines.segments import rebuild_segments
    idx = _copy(mini_index, tmp_path)
    n = _manifest(idx)["segments"][0]["chunks"]
    cfg = _cfg(test_config, segment_max_chunks=math.ceil(n / 3))
    rebuild_segments(cfg, str(idx))
    before = _manifest(idx)
    assert len(before["segments"]) == 3
    rc, _ = _answer(idx, tmp_path, capsys, "before.jsonl")
    assert rc == 0
    bad = before["segments"][1]["id"]
    _flip(os.path.join(str(idx), "segments", bad, "vectors.npy"))
    logs = []
    run_index(cfg, str(mini_corpus), str(idx), progress=False, log=logs.append)
    after = _manifest(idx)
    assert any(bad in line and "building its rows again" in line for line in logs), logs
    ids = [s["id"] for s in after["segments"]]
    assert before["segments"][0]["id"] in ids and before["segments"][2]["id"] in ids  # reused
    assert sum(s["live"] for s in after["segments"]) == sum(s["live"] for s in before["segments"])
    for d in _segment_dirs(idx):
        check_segment(d, full=True)
    rc, _ = _answer(idx, tmp_path, capsys, "after.jsonl")
    assert rc == 0 and _answers(tmp_path / "after.jsonl") == _answers(tmp_path / "before.jsonl")
    # one segment only, corrupt: the same rows built again (same content-derived id), whole
    one = _copy(mini_index, tmp_path, "one")
    sid = _manifest(one)["segments"][0]["id"]
    _flip(os.path.join(str(one), "segments", sid, "post_tf.npy"))
    run_index(_cfg(test_config), str(mini_corpus), str(one), progress=False, log=lambda *_: None)
    assert [s["id"] for s in _manifest(one)["segments"]] == [sid]
    check_segment(os.path.join(str(one), "segments", sid), full=True)


def test_a_merge_refuses_a_corrupt_segment(mini_index, tmp_path):
    """Before its rows go into a merge a segment is hashed whole, whatever the host remembers."""
    import transforms.index.segment_build as sb
    from transforms.index.segment_plan import BuildItem
    idx = _copy(mini_index, tmp_path)
    seg = _segment_dirs(idx)[0]
    check_segment(seg)
    _flip(os.path.join(seg, "sent_vec.npy"))
    import transforms.index.segments as segments  # a change no stat shows: the fingerprint still matches
    segments._VERIFIED[os.path.realpath(seg)] = segments._fingerprints(os.path.realpath(seg),
                                                                        json.load(open(os.path.join(seg, META_FILE)))["files"])
    check_segment(seg)  # trusted from the fingerprint (what the answer job's cheap open does)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(BuildItem([], None, None, [(os.path.basename(seg), [0, 1])], 2).to_json()))
    fn = sb.BuildSegmentFn(str(idx), _manifest(idx)["model"]["namespace"])
    with pytest.raises(SegmentCorrupt, match="sent_vec.npy"):
        list(fn.process(str(plan)))


# --- a damaged index file is one line, exit 2, naming it and what to run --------------------------

@pytest.mark.parametrize("damage", ["truncated vectors.npy", "unknown segment format", "cut manifest.json",
                                    "missing post_ptr.npy"])
def test_damaged_index_files_are_one_line_naming_the_file(mini_index, tmp_path, capsys, damage):
    idx = _copy(mini_index, tmp_path)
    seg = _segment_dirs(idx)[0]
    vdir = publish.resolve_index(str(idx))
    if damage == "truncated vectors.npy":
        p = os.path.join(seg, "vectors.npy")
        os.truncate(p, os.path.getsize(p) // 2)
        named, hint = p, "ragbeam index"
    elif damage == "unknown segment format":
        p = os.path.join(seg, META_FILE)
        meta = json.load(open(p))
        meta["format"] = "seg-v9"
        json.dump(meta, open(p, "w"))
        mpath = os.path.join(vdir, "manifest.json")  # a version that lists it as it is (a newer ragbeam's)
        m = json.load(open(mpath))
        from transforms.common.storage import sha256_file
        m["segments"][0]["meta_sha256"] = sha256_file(p)
        json.dump(m, open(mpath, "w"))
        named, hint = p, "build-artifacts"
    elif damage == "cut manifest.json":
        p = os.path.join(vdir, "manifest.json")
        data = open(p, "rb").read()
        open(p, "wb").write(data[: len(data) // 3])
        named, hint = p, "re-index"
    else:
        p = os.path.join(seg, "post_ptr.npy")
        os.remove(p)
        named, hint = p, "ragbeam index"
    rc, out = _answer(idx, tmp_path, capsys)
    assert rc == 2, out
    line = _one_line(out.err)
    assert named in line and hint in line and "Traceback" not in out.err


def test_a_cut_live_manifest_stops_an_index_run_with_one_line(mini_index, mini_corpus, tmp_path, capsys):
    idx = _copy(mini_index, tmp_path)
    p = os.path.join(publish.resolve_index(str(idx)), "manifest.json")
    open(p, "w").write('{"version": "x", "segm')
    rc = main(["index", "--input", str(mini_corpus), "--output", str(idx), "--quiet"])
    out = capsys.readouterr()
    assert rc == 2 and p in _one_line(out.err) and "re-index" in out.err


# --- build-artifacts publishes a new version ------------------------------------------------------

def test_build_artifacts_publishes_a_new_version_and_leaves_the_read_one_whole(mini_index, tmp_path, test_config):
    """A reader of the live version (its manifest loaded, a lease held) answers the same after
    build-artifacts rebuilt the index into other segments with keep_versions 1: the version it
    reads was neither rewritten nor pruned. Once the reader is gone the next prune removes it."""
    from pipelines.segments import after_publish, rebuild_segments
    from transforms.ingest.embed import model_spec_from_config
    from transforms.query.engine import QAEngine
    from transforms.query.records import Question
    idx = _copy(mini_index, tmp_path)
    old_dir, lease = publish.pin_current(str(idx))
    manifest_bytes = open(os.path.join(old_dir, "manifest.json"), "rb").read()
    cfg = _cfg(test_config)
    engine = QAEngine(old_dir, cfg, model_spec_from_config(cfg), manifest=json.loads(manifest_bytes))
    qs = [Question(i, t) for i, t in QUESTIONS]
    rows = lambda e: [(r["id"], r["status"], r["answer"]) for r in (x.to_row() for x in e.run(qs, 5))]  # noqa: E731
    first = rows(engine)
    n = json.loads(manifest_bytes)["segments"][0]["chunks"]
    got = rebuild_segments(_cfg(test_config, segment_max_chunks=math.ceil(n / 2)), str(idx))
    assert got["version"] != os.path.basename(old_dir) and publish.current_version(str(idx)) == got["version"]
    assert len(_manifest(idx)["segments"]) == 2
    assert open(os.path.join(old_dir, "manifest.json"), "rb").read() == manifest_bytes  # never rewritten
    for s in json.loads(manifest_bytes)["segments"]:
        check_segment(os.path.join(str(idx), "segments", s["id"]), full=True)  # never pruned while read
    engine.close()
    engine = QAEngine(old_dir, cfg, model_spec_from_config(cfg), manifest=json.loads(manifest_bytes))
    assert rows(engine) == first
    engine.close()
    lease.release()
    after_publish(str(idx), 1)
    assert not os.path.exists(old_dir)
    assert publish.list_versions(str(idx)) == [got["version"]]


def test_build_artifacts_refuses_a_version_that_is_not_live(mini_index, tmp_path, test_config, capsys):
    from pipelines.segments import rebuild_segments
    idx = _copy(mini_index, tmp_path)
    old = publish.resolve_index(str(idx))
    cfg = test_config.model_copy(update={"index": test_config.index.model_copy(update={"keep_versions": 3})})
    rebuild_segments(cfg, str(idx))
    rc = main(["build-artifacts", "--index", old])
    assert rc == 2 and "is not the live one" in _one_line(capsys.readouterr().err)


# --- readers pin their version --------------------------------------------------------------------


@pytest.fixture
def s3_bucket(s3_config_env):
    """A boto3 client on the local S3 server with bucket hardening3, the storage layer pointed at it."""
    c = s3_config_env.client()
    try:
        c.create_bucket(Bucket="hardening3")
    except Exception:
        pass
    return c


def test_a_reader_that_pins_while_the_pruner_looks_keeps_its_version_s3(s3_bucket, monkeypatch):
    """No atomic rename on S3: the pruner writes a marker into the version and looks at the leases
    again, a reader writes its lease and then looks for the marker; a reader pinning right after the
    pruner's first look keeps its version, and a version being pruned is never opened."""
    c, root = s3_bucket, "s3://hardening3/race"
    for v in ("v1", "v2", "v3"):
        c.put_object(Bucket="hardening3", Key=f"race/versions/{v}/manifest.json", Body=b"{}")
    c.put_object(Bucket="hardening3", Key="race/CURRENT", Body=b"v3\n")
    real, leases = layout.leased_versions, []

    def blind_first_look(index_dir, now=None, drop_stale=False):
        if not leases:  # the reader pins v1 just after the pruner's first look
            leases.append(layout.VersionLease(root, "v1"))
            leases[0].acquire()
            return set()
        return real(index_dir, now, drop_stale)
    monkeypatch.setattr(layout, "leased_versions", blind_first_look)
    try:
        assert publish.prune(root, keep=1) == ["v2"]
        assert publish.list_versions(root) == ["v1", "v3"]
        keys = [o["Key"] for o in c.list_objects_v2(Bucket="hardening3", Prefix="race/versions/v1/")["Contents"]]
        assert keys == ["race/versions/v1/manifest.json"]  # the marker taken back
    finally:
        leases[0].release()
    # a version whose marker is there is being deleted: a reader goes back to CURRENT, and gives up
    # with a clear error when even that one is going
    c.put_object(Bucket="hardening3", Key="race/versions/v3/" + layout.PRUNING_MARKER, Body=b"x")
    with pytest.raises(FileNotFoundError, match="removed while it was being opened"):
        publish.pin_current(root)


def test_pruning_never_removes_a_leased_version_s3(s3_bucket, tmp_path):
    c = s3_bucket
    root = "s3://hardening3/idx"
    for v in ("v1", "v2", "v3"):
        c.put_object(Bucket="hardening3", Key=f"idx/versions/{v}/manifest.json", Body=b"{}")
    c.put_object(Bucket="hardening3", Key="idx/CURRENT", Body=b"v3\n")
    with layout.pinned(root, "v1"):
        assert publish.prune(root, keep=1) == ["v2"]
    assert publish.list_versions(root) == ["v1", "v3"]
    assert publish.prune(root, keep=1) == ["v1"]
    # item 7/8 on object storage: a stray object is reported and not a version; a prefix that is
    # not an index and holds a user's objects is refused
    c.put_object(Bucket="hardening3", Key="idx/versions/v1.txt", Body=b"mine")
    assert "versions/v1.txt" in layout.unexpected_entries(root) and publish.list_versions(root) == ["v3"]
    publish.prune(root, keep=1)
    assert c.get_object(Bucket="hardening3", Key="idx/versions/v1.txt")["Body"].read() == b"mine"
    c.put_object(Bucket="hardening3", Key="mine/staging/draft.txt", Body=b"mine")
    with pytest.raises(layout.ForeignOutputError, match="staging/draft.txt"):
        layout.refuse_foreign_output("s3://hardening3/mine")


def test_a_nightly_with_keep_versions_1_leaves_a_running_answer_jobs_version(mini_index, mini_corpus, tmp_path,
                                                                               test_config, capsys, monkeypatch):
    """The answer job pins its version, and its workers never read the manifest again: an index
    run (keep_versions 1) publishing and pruning between the driver's read and the workers' leaves
    the job's answers as they were."""
    from pipelines.index import run_index
    idx = _copy(mini_index, tmp_path)
    rc, _ = _answer(idx, tmp_path, capsys, "before.jsonl")
    assert rc == 0
    from transforms.query import version_segments
    orig = version_segments.VersionSegments.__init__
    ran = []

    def nightly_then_open(self, version_dir, manifest):
        if not ran:  # the driver has read the manifest: a nightly runs now, before any worker starts
            ran.append(run_index(_cfg(test_config), str(mini_corpus), str(idx), progress=False, log=lambda *_: None))
            assert publish.current_version(str(idx)) != os.path.basename(version_dir)
        orig(self, version_dir, manifest)
    monkeypatch.setattr(version_segments.VersionSegments, "__init__", nightly_then_open)
    rc, out = _answer(idx, tmp_path, capsys)
    assert rc == 0, out.err
    assert _answers(tmp_path / "a.jsonl") == _answers(tmp_path / "before.jsonl")
    monkeypatch.setattr(version_segments.VersionSegments, "__init__", orig)
    run_index(_cfg(test_config), str(mini_corpus), str(idx), progress=False, log=lambda *_: None)
    assert len(publish.list_versions(str(idx))) == 1  # the reader gone, its version is pruned


# --- nothing after the switch fails a run; odd entries reported, never deleted --------------------

STRAY = ["versions/v1.txt", "versions/notes/readme.md", "segments/clips/c1.txt", "segments/x.txt",
         "staging/draft.txt", "staging/mine/keep.md", "README.txt", "leases/odd.txt"]


def test_stray_entries_are_reported_before_work_and_never_deleted(mini_index, mini_corpus, tmp_path, test_config):
    from pipelines.index import run_index
    idx = _copy(mini_index, tmp_path)
    for rel in STRAY:
        p = idx / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("mine")
    logs = []
    old = publish.current_version(str(idx))
    s = run_index(_cfg(test_config), str(mini_corpus), str(idx), progress=False, log=logs.append)
    assert publish.current_version(str(idx)) == s["version"] != old
    report = next(i for i, line in enumerate(logs) if "no index run wrote" in line)
    assert report < next(i for i, line in enumerate(logs) if "listing" in line)  # before any work
    for rel in ("versions/v1.txt", "segments/clips", "staging/draft.txt", "README.txt"):
        assert rel in " ".join(s["unexpected_entries"]) + logs[report]
    for rel in STRAY:
        assert (idx / rel).read_text() == "mine", rel
    assert publish.list_versions(str(idx)) == [s["version"]]  # keep_versions 1: old pruned, strays not


@pytest.mark.parametrize("failing", ["prune", "prune_segments", "commit_new_entries", "list_versions"])
def test_nothing_after_the_switch_fails_the_run(mini_index, mini_corpus, tmp_path, test_config, monkeypatch,
                                                 failing):
    import pipelines.index as index_mod
    import pipelines.segments as segments_mod
    from pipelines.index import run_index
    idx = _copy(mini_index, tmp_path)
    orig_publish = publish.publish

    def publish_then_break(index_dir, version):
        got = orig_publish(index_dir, version)

        def boom(*a, **k):
            raise NotADirectoryError(20, "Not a directory", "versions/v1.txt/manifest.json")
        target = {"prune": (publish, "prune"), "prune_segments": (segments_mod, "prune_segments"),
                  "commit_new_entries": (index_mod, "commit_new_entries"),
                  "list_versions": (publish, "list_versions")}[failing]
        monkeypatch.setattr(*target, boom)
        return got
    monkeypatch.setattr(publish, "publish", publish_then_break)
    logs = []
    s = run_index(_cfg(test_config), str(mini_corpus), str(idx), progress=False, log=logs.append)
    assert publish.current_version(str(idx)) == s["version"]
    assert s["warnings"] and "the new version is live" in s["warnings"][0]
