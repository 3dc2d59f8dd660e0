"""Errors people can act on against the local S3 server: a missing bucket, wrong credentials, a
malformed lock object and a segment that does not match its manifest are one line, exit 2, no
traceback, and never echo a secret."""
from __future__ import annotations

import json

import pytest

from configs.schema import load_config
from tests.unit.test_config_refusals import one_line_error, questions_file


@pytest.fixture
def s3_env(s3_config_env):
    """This process talks to the test S3 server through the config's environment overrides."""
    s3_server = s3_config_env
    c = s3_server.client()
    try:
        c.create_bucket(Bucket="hardening2")
    except (c.exceptions.BucketAlreadyOwnedByYou, c.exceptions.BucketAlreadyExists):
        pass
    c.put_object(Bucket="hardening2", Key="docs/a.txt", Body=b"some text\n")
    return s3_server


def test_a_missing_s3_input_bucket_is_one_line(s3_env, tmp_path, capsys):
    from pipelines.cli import main
    rc = main(["index", "--quiet", "--input", "s3://no-such-bucket-h2/docs", "--output", str(tmp_path / "ix")])
    one_line_error(capsys, rc, "--input s3://no-such-bucket-h2/docs: no such bucket 'no-such-bucket-h2'")


@pytest.mark.parametrize("variable, value, code", [
    ("RAGBEAM__S3__ACCESS_KEY_ID", "AKIAWRONGKEY0000H2", "InvalidAccessKeyId"),
    ("RAGBEAM__S3__SECRET_ACCESS_KEY", "wrong-secret-h2-do-not-print", "SignatureDoesNotMatch")])
def test_wrong_s3_credentials_are_one_line_that_never_echoes_them(s3_env, tmp_path, capsys, monkeypatch,
                                                                 variable, value, code):
    from pipelines.cli import main
    monkeypatch.setenv(variable, value)
    rc = main(["index", "--quiet", "--input", "s3://hardening2/docs", "--output", str(tmp_path / "ix")])
    line = one_line_error(capsys, rc, "--input s3://hardening2/docs", code)
    assert value not in line and s3_env.secret_key not in line


@pytest.mark.parametrize("body", [b'{"expires_at": "tomorrow"}', b'["owner", 1]', b"not json",
                                  b'{"owner": "x", "expires_at": NaN}'])
def test_a_malformed_lock_object_is_one_line(s3_env, tmp_path, capsys, body):
    from pipelines.cli import main
    s3_env.client().put_object(Bucket="hardening2", Key="idx-badlock/.lock", Body=body)
    rc = main(["index", "--quiet", "--input", str(tmp_path), "--output", "s3://hardening2/idx-badlock"])
    one_line_error(capsys, rc, "lock s3://hardening2/idx-badlock/.lock is not a ragbeam lock object", "delete it")
    assert s3_env.client().get_object(Bucket="hardening2", Key="idx-badlock/.lock")["Body"].read() == body


def test_a_segment_whose_sha256_does_not_match_its_manifest_is_one_line(s3_env, tmp_path, capsys, monkeypatch):
    from pipelines.cli import main
    from transforms.ingest.embed import model_spec_from_config
    spec = model_spec_from_config(load_config(environ={}))
    c = s3_env.client()
    manifest = {"model": {"id": spec.model_id, "sha256": spec.model_sha256, "max_length": spec.max_length},
                "version": "v1", "segments": [{"id": "s1", "chunks": 1, "live": 1, "deleted": 0,
                                               "meta_sha256": "0" * 64}], "bm25": {"num_docs": 1, "avgdl": 1.0}}
    c.put_object(Bucket="hardening2", Key="idx-badsha/versions/v1/manifest.json", Body=json.dumps(manifest).encode())
    c.put_object(Bucket="hardening2", Key="idx-badsha/segments/s1/segment.json", Body=b"{}")
    c.put_object(Bucket="hardening2", Key="idx-badsha/CURRENT", Body=b"v1\n")
    monkeypatch.setenv("RAGBEAM_INDEX_CACHE_DIR", str(tmp_path / "cache"))
    q = questions_file(tmp_path)
    rc = main(["answer", "--quiet", "--index", "s3://hardening2/idx-badsha", "--questions", str(q),
               "--output", str(tmp_path / "answers.jsonl")])
    one_line_error(capsys, rc, "segments/s1/segment.json: sha256 differs", "manifest's " + "0" * 64)
    assert not (tmp_path / "answers.jsonl").exists() and not (tmp_path / "answers.jsonl.parts").exists()
