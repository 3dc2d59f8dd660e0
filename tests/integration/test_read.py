"""The read stage: listing and reading a local folder and the same folder in S3."""
from __future__ import annotations

import hashlib
import os
import pickle

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from transforms.common.s3 import S3Settings
from transforms.ingest.read import (DEAD_LETTER, ListedObject, ReadObjectsFn, list_objects,
                             read_object)
from transforms.records import DeadLetter, RawObject

BUCKET = "ragbeam-read-test"
PREFIX = "corpus/v1"
BINARY = bytes(range(256)) * 37 + b"\x00\xff"
EXPECTED_KEYS = ["a.md", "empty.txt", "sub/b.html", "sub/deeper/c.bin", "z.txt"]


def make_corpus(root):
    files = {
        "a.md": b"# Title\n\nSome text.\n",
        "empty.txt": b"",
        "sub/b.html": "<html><body><h1>Caf\u00e9</h1></body></html>".encode(),
        "sub/deeper/c.bin": BINARY,
        "z.txt": b"last\n" * 1000,
        ".hidden": b"secret",  # hidden files and dirs are skipped everywhere
        ".git/config": b"[core]\n",
        "sub/.DS_Store": b"\x00\x01",
    }
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    return root, make_corpus(root)


@pytest.fixture(scope="module")
def s3_corpus(s3_server, corpus):
    root, _ = corpus
    s3_server.upload_dir(root, BUCKET, PREFIX)
    c = s3_server.client()
    c.put_object(Bucket=BUCKET, Key=f"{PREFIX}/emptydir/", Body=b"")  # a "directory marker"
    c.put_object(Bucket=BUCKET, Key="corpus/v1-other/x.txt", Body=b"not under corpus/v1/")
    return f"s3://{BUCKET}/{PREFIX}"


# --- local ---------------------------------------------------------------------------

def test_local_listing_keys_sizes_order(corpus):
    root, files = corpus
    listed = list_objects(str(root))
    assert [o.key for o in listed] == EXPECTED_KEYS
    assert {o.key: o.size for o in listed} == {k: len(files[k]) for k in EXPECTED_KEYS}
    assert all(o.uri == os.path.join(str(root), o.key) for o in listed)
    assert list_objects(str(root)) == listed  # deterministic
    assert list_objects(f"file://{root}") == listed


def test_local_listing_survives_symlink_loop(tmp_path):
    make_corpus(tmp_path)
    os.symlink(tmp_path, tmp_path / "sub" / "loop")  # sub/loop -> root
    assert [o.key for o in list_objects(str(tmp_path))] == EXPECTED_KEYS


def test_local_single_file_and_missing(corpus, tmp_path):
    root, files = corpus
    [one] = list_objects(str(root / "sub" / "b.html"))
    assert (one.key, one.size) == ("b.html", len(files["sub/b.html"]))
    with pytest.raises(FileNotFoundError):
        list_objects(str(tmp_path / "nope"))


def test_local_read(corpus):
    root, files = corpus
    for listed in list_objects(str(root)):
        raw = read_object(listed)
        assert raw.data == files[listed.key]
        assert raw.content_hash == hashlib.sha256(files[listed.key]).hexdigest()
        assert (raw.uri, raw.key, raw.size, raw.mtime) == (listed.uri, listed.key, listed.size,
                                                           listed.mtime)
        assert raw == RawObject.from_bytes(listed.uri, listed.key, raw.data, listed.mtime)


def test_settings_hide_secrets_and_pickle():
    s = S3Settings(endpoint_url="http://127.0.0.1:1", region="", access_key_id="AKIDEXAMPLE",
                   secret_access_key="wJalrXUtnFEMI")
    assert "AKIDEXAMPLE" not in repr(s) and "wJalrXUtnFEMI" not in str(s)
    assert s.region is None  # "${VAR:-}" in YAML gives ""
    shipped = pickle.dumps(ReadObjectsFn(s))  # what Beam ships to workers
    assert b"AKIDEXAMPLE" not in shipped and b"wJalrXUtnFEMI" not in shipped  # keys stay in the driver
    fn = pickle.loads(shipped)
    assert fn._client is None and fn._s3.endpoint_url == s.endpoint_url and fn._s3.access_key_id is None


# --- s3 ------------------------------------------------------------------------------

def test_s3_listing_matches_local(s3_server, corpus, s3_corpus):
    root, _ = corpus
    local = list_objects(str(root))
    remote = list_objects(s3_corpus, s3_server.settings())
    assert [(o.key, o.size) for o in remote] == [(o.key, o.size) for o in local]
    assert all(o.uri == f"{s3_corpus}/{o.key}" and o.mtime > 0 for o in remote)
    assert list_objects(s3_corpus + "/", s3_server.settings()) == remote


def test_s3_single_object(s3_server, s3_corpus):
    [one] = list_objects(f"{s3_corpus}/sub/deeper/c.bin", s3_server.settings())
    assert (one.key, one.size) == ("c.bin", len(BINARY))
    assert list_objects(f"{s3_corpus}/nothing-here", s3_server.settings()) == []


def test_s3_read_matches_local(s3_server, corpus, s3_corpus):
    root, _ = corpus
    client = s3_server.settings().client()
    local = {o.key: read_object(o) for o in list_objects(str(root))}
    for listed in list_objects(s3_corpus, s3_server.settings()):
        raw = read_object(listed, client)
        assert raw.data == local[listed.key].data
        assert raw.content_hash == local[listed.key].content_hash
        assert raw.uri == listed.uri and raw.size == listed.size


def test_dofn_reads_and_dead_letters(s3_server, s3_corpus):
    fn = ReadObjectsFn(s3_server.settings())
    fn.setup()
    [good] = list(fn.process(ListedObject(f"{s3_corpus}/a.md", "a.md", 20, 1.0)))
    assert isinstance(good, RawObject) and good.data.startswith(b"# Title")
    missing = ListedObject(f"{s3_corpus}/missing.txt", "missing.txt", 1, 0.0)
    [out] = list(fn.process(missing))
    assert isinstance(out, beam.pvalue.TaggedOutput) and out.tag == DEAD_LETTER
    assert isinstance(out.value, DeadLetter)
    assert (out.value.source_uri, out.value.content_hash, out.value.stage) == (missing.uri, "", "read")
    assert "NoSuchKey" in out.value.reason or "404" in out.value.reason
    assert s3_server.secret_key not in out.value.reason


def test_dofn_in_pipeline(s3_server, corpus, s3_corpus, monkeypatch):
    root, files = corpus
    from transforms.common.s3 import export_to_environment
    for k in ("RAGBEAM__S3__ENDPOINT_URL", "RAGBEAM__S3__ACCESS_KEY_ID", "RAGBEAM__S3__SECRET_ACCESS_KEY"):
        monkeypatch.delenv(k, raising=False)
    export_to_environment(s3_server.settings())  # as the jobs do: the in-process workers find the keys there
    listed = list_objects(s3_corpus, s3_server.settings())
    missing = ListedObject(f"{s3_corpus}/gone.md", "gone.md", 3, 0.0)
    opts = PipelineOptions(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
    from transforms.common.s3 import export_to_environment
    export_to_environment(s3_server.settings())  # workers take keys from their environment, never the graph
    with beam.Pipeline(options=opts) as p:
        out = (p | beam.Create(listed + [missing])
               | beam.ParDo(ReadObjectsFn(s3_server.settings())).with_outputs(DEAD_LETTER, main="objects"))
        assert_that(out.objects | "Keys" >> beam.Map(lambda r: (r.key, r.content_hash)),
                    equal_to([(k, hashlib.sha256(files[k]).hexdigest()) for k in EXPECTED_KEYS]))
        assert_that(out[DEAD_LETTER] | "Uris" >> beam.Map(lambda d: (d.source_uri, d.stage)),
                    equal_to([(missing.uri, "read")]), label="DeadLetters")
    counters = {c.key.metric.name: c.committed
                for c in p.result.metrics().query()["counters"] if c.key.metric.namespace == "ragbeam"}
    assert counters["read_objects"] == len(EXPECTED_KEYS)
    assert counters["read_errors"] == 1
    assert counters["read_bytes"] == sum(len(files[k]) for k in EXPECTED_KEYS)


def test_other_schemes_go_through_beam_filesystems(s3_server, corpus, s3_corpus):
    # Any scheme but s3/local goes through FileSystems; Beam's own s3 filesystem,
    # pointed at the test server, stands in for gs:// and friends here.
    import gzip

    from apache_beam.io.filesystems import FileSystems

    from transforms.ingest.read import _list_filesystems, _read_filesystems
    root, files = corpus
    zipped = gzip.compress(b"hello")
    s3_server.client().put_object(Bucket=BUCKET, Key="beamfs/d/x.gz", Body=zipped)
    saved = FileSystems._pipeline_options
    FileSystems.set_options(PipelineOptions([
        f"--s3_endpoint_url={s3_server.endpoint_url}", f"--s3_region_name={s3_server.region}",
        f"--s3_access_key_id={s3_server.access_key}", f"--s3_secret_access_key={s3_server.secret_key}"]))
    try:
        listed = _list_filesystems(s3_corpus)
        assert sorted((o.key, o.size) for o in listed) == [(k, len(files[k])) for k in EXPECTED_KEYS]
        assert _read_filesystems(listed[0]).data == files[listed[0].key]
        [gz] = _list_filesystems(f"s3://{BUCKET}/beamfs/d/x.gz")
        assert gz.key == "x.gz" and _read_filesystems(gz).data == zipped  # not gunzipped
    finally:
        FileSystems._pipeline_options = saved
