"""The read stage: listing and reading a local folder and the same folder in S3."""
from __future__ import annotations

import hashlib

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to

from tests.unit.test_read import BINARY, EXPECTED_KEYS, corpus  # noqa: F401 (corpus: a fixture here too)
from transforms.ingest.read import (DEAD_LETTER, ListedObject, ReadObjectsFn, list_objects,
                             read_object)
from transforms.records import DeadLetter, RawObject

BUCKET = "ragbeam-read-test"
PREFIX = "corpus/v1"


@pytest.fixture(scope="module")
def s3_corpus(s3_server, corpus):
    root, _ = corpus
    s3_server.upload_dir(root, BUCKET, PREFIX)
    c = s3_server.client()
    c.put_object(Bucket=BUCKET, Key=f"{PREFIX}/emptydir/", Body=b"")  # a "directory marker"
    c.put_object(Bucket=BUCKET, Key="corpus/v1-other/x.txt", Body=b"not under corpus/v1/")
    return f"s3://{BUCKET}/{PREFIX}"


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
