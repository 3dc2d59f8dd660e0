"""Issue 20, config and path safety: duplicate YAML keys, alias bombs, answer outputs that would
destroy an input, and errors people can act on (one line, exit 2, no traceback). Each test
fails on the code before its fix."""
from __future__ import annotations

import json
import time

import pytest

from configs.schema import ConfigError, load_config


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def one_line_error(capsys, rc, *needles):
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if not ln.startswith(("WARNING", "INFO"))]
    assert rc == 2, err
    assert "Traceback" not in err and len(lines) == 1, err
    for n in needles:
        assert n in lines[0], err
    return lines[0]


# --- YAML: duplicate keys and alias bombs ----------------------------------------------------

def test_a_second_acl_key_is_a_config_error_naming_the_key_and_both_lines(tmp_path):
    p = write(tmp_path, "acl:\n  - prefix: secret/\n    groups: [hr]\nchunk:\n  chunk_tokens: 100\n"
                        "acl:\n  - prefix: other/\n    groups: [everyone]\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'acl' at lines 1 and 6"):
        load_config(p, environ={})


def test_duplicate_keys_anywhere_are_refused_but_merge_keys_still_override(tmp_path):
    nested = write(tmp_path, "answer:\n  kind: extractive\n  top_k: 3\n  kind: openai\n", "n.yaml")
    with pytest.raises(ConfigError, match=r"duplicate key 'kind' at lines 2 and 4"):
        load_config(nested, environ={})
    flow = write(tmp_path, "chunk: {chunk_tokens: 100, chunk_tokens: 120}\n", "f.yaml")
    with pytest.raises(ConfigError, match=r"duplicate key 'chunk_tokens' at lines 1 and 1"):
        load_config(flow, environ={})
    merged = write(tmp_path, "chunk:\n  <<: {chunk_tokens: 100, overlap_tokens: 10}\n  chunk_tokens: 120\n",
                   "m.yaml")
    assert load_config(merged, environ={}).chunk.chunk_tokens == 120  # YAML's override, not a duplicate


BILLION_LAUGHS = "".join(
    [f'a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    + [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9)])


def test_a_billion_laughs_config_is_refused_in_well_under_a_second(tmp_path):
    assert len(BILLION_LAUGHS) < 700  # 9 ** 9 strings once expanded
    p = write(tmp_path, BILLION_LAUGHS)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="alias"):
        load_config(p, environ={})
    assert time.monotonic() - t0 < 0.5


def test_too_many_aliases_a_self_reference_or_a_huge_file_are_refused(tmp_path):
    many = write(tmp_path, "x: &x 1\ny: [" + ", ".join(["*x"] * 101) + "]\n", "many.yaml")
    with pytest.raises(ConfigError, match="more than 100 YAML aliases"):
        load_config(many, environ={})
    loop = write(tmp_path, "runner:\n  options: &o {x: *o}\n", "loop.yaml")
    with pytest.raises(ConfigError, match="alias"):
        load_config(loop, environ={})
    big = write(tmp_path, "#" + "x" * (1 << 20) + "\n", "big.yaml")
    with pytest.raises(ConfigError, match="larger than 1024 KiB"):
        load_config(big, environ={})
    deep = write(tmp_path, "runner:\n  options:\n    x: " + "[" * 50_000 + "]" * 50_000 + "\n", "deep.yaml")
    with pytest.raises(ConfigError):
        load_config(deep, environ={})


def test_an_alias_bomb_in_an_environment_override_is_refused():
    value = "{" + BILLION_LAUGHS.replace("\n", ", ").rstrip(", ") + "}"
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match="RAGBEAM__RUNNER__OPTIONS.*alias"):
        load_config(environ={"RAGBEAM__RUNNER__OPTIONS": value})
    assert time.monotonic() - t0 < 0.5


def test_the_cli_reports_a_duplicate_key_without_a_traceback(tmp_path, capsys):
    from pipelines.cli import main
    p = write(tmp_path, "acl: []\nacl: []\n")
    rc = main(["index", "--config", str(p), "--input", str(tmp_path), "--output", str(tmp_path / "ix")])
    err = capsys.readouterr().err
    assert rc == 2 and "duplicate key 'acl' at lines 1 and 2" in err and "Traceback" not in err


# --- answer --output that would destroy an input ---------------------------------------------

def fake_index(tmp_path):
    ix = tmp_path / "index"
    (ix / "versions" / "v1").mkdir(parents=True)
    (ix / "versions" / "v1" / "manifest.json").write_text("{}")
    (ix / "CURRENT").write_text("v1\n")
    return ix


def questions_file(tmp_path):
    q = tmp_path / "q.jsonl"
    q.write_text(json.dumps({"id": "a", "question": "What is glob?"}) + "\n")
    return q


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_output_equal_to_the_question_file_is_refused(tmp_path, capsys, overwrite):
    from pipelines.cli import main
    ix, q = fake_index(tmp_path), questions_file(tmp_path)
    before = q.read_bytes()
    rc = main(["answer", "--index", str(ix), "--questions", str(q), "--output", str(q)]
              + (["--overwrite"] if overwrite else []))
    line = one_line_error(capsys, rc, "already exists and is the question file")
    assert "with or without --overwrite" in line
    assert q.read_bytes() == before and not (tmp_path / "q.jsonl.parts").exists()
    assert not (tmp_path / "q.jsonl.lock").exists()


def test_an_output_that_is_the_question_file_through_a_link_is_refused(tmp_path, capsys):
    from pipelines.cli import main
    ix, q = fake_index(tmp_path), questions_file(tmp_path)
    link = tmp_path / "link.jsonl"
    link.symlink_to(q)
    rc = main(["answer", "--index", str(ix), "--questions", str(q), "--output", str(link), "--overwrite"])
    one_line_error(capsys, rc, "is the question file")


@pytest.mark.parametrize("where", ["CURRENT", "answers.jsonl", "versions/v1/manifest.json", "versions/v1/a.jsonl",
                                   "."])
@pytest.mark.parametrize("overwrite", [False, True])
def test_an_output_inside_an_index_is_refused(tmp_path, capsys, where, overwrite):
    from pipelines.cli import main
    ix, q = fake_index(tmp_path), questions_file(tmp_path)
    out = ix / where
    rc = main(["answer", "--index", str(ix), "--questions", str(q), "--output", str(out)]
              + (["--overwrite"] if overwrite else []))
    line = one_line_error(capsys, rc, f"is inside the index at {ix.resolve()}")
    if out.exists():
        assert "already exists and is inside the index" in line
    assert (ix / "CURRENT").read_text() == "v1\n"
    assert sorted(p.name for p in ix.iterdir()) == ["CURRENT", "versions"]


def test_an_output_inside_another_index_or_a_version_dir_is_refused(tmp_path):
    from transforms.query.output_guard import OutputPathError, refuse_output_over_inputs
    ix, q = fake_index(tmp_path), questions_file(tmp_path)
    other = tmp_path / "other"
    (other / "versions").mkdir(parents=True)
    with pytest.raises(OutputPathError, match="inside the index"):
        refuse_output_over_inputs(str(other / "a.jsonl"), str(q), str(ix))
    loose = tmp_path / "loose-version"  # a version dir given as --index, outside any index dir
    loose.mkdir()
    (loose / "manifest.json").write_text("{}")
    with pytest.raises(OutputPathError, match="inside the index"):
        refuse_output_over_inputs(str(loose / "a.jsonl"), str(q), str(loose))
    with pytest.raises(OutputPathError, match="would overwrite or delete the question file"):
        refuse_output_over_inputs(str(tmp_path / "a"), str(tmp_path / "a.parts" / "q.jsonl"), str(ix))
    refuse_output_over_inputs(str(tmp_path / "answers.jsonl"), str(q), str(ix))  # a normal output passes


def test_s3_outputs_are_compared_by_prefix():
    from transforms.query.output_guard import OutputPathError, refuse_output_over_inputs
    q, ix = "s3://b/q/questions.jsonl", "s3://b/idx"
    with pytest.raises(OutputPathError, match="is the question file"):
        refuse_output_over_inputs(q, q, ix)
    for out in ("s3://b/idx/CURRENT", "s3://b/idx/versions/v1/x.jsonl", "s3://b/idx"):
        with pytest.raises(OutputPathError, match="inside the index at s3://b/idx"):
            refuse_output_over_inputs(out, q, ix)
    with pytest.raises(OutputPathError, match="inside the index at s3://b/idx"):
        refuse_output_over_inputs("s3://b/idx/CURRENT", q, "s3://b/idx/versions/v1")
    refuse_output_over_inputs("s3://b/idx-answers.jsonl", q, ix)
    refuse_output_over_inputs("s3://b/answers.jsonl", q, ix)


# --- errors people can act on: one line, exit 2, no traceback --------------------------------

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


def test_access_denied_at_listing_is_an_s3_access_error(monkeypatch):
    from botocore.exceptions import ClientError

    from transforms.common.errors import ActionableError
    from transforms.common.s3 import S3Settings
    from transforms.ingest.read import list_objects

    class Denied:
        def get_paginator(self, _):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "ListObjectsV2")
    monkeypatch.setattr(S3Settings, "client", lambda self: Denied())
    with pytest.raises(ActionableError, match=r"--input s3://b/p: access denied \(AccessDenied\)"):
        list_objects("s3://b/p", S3Settings())


@pytest.mark.parametrize("body", [b'{"expires_at": "tomorrow"}', b'["owner", 1]', b"not json",
                                  b'{"owner": "x", "expires_at": NaN}'])
def test_a_malformed_lock_object_is_one_line(s3_env, tmp_path, capsys, body):
    from pipelines.cli import main
    s3_env.client().put_object(Bucket="hardening2", Key="idx-badlock/.lock", Body=body)
    rc = main(["index", "--quiet", "--input", str(tmp_path), "--output", "s3://hardening2/idx-badlock"])
    one_line_error(capsys, rc, "lock s3://hardening2/idx-badlock/.lock is not a ragbeam lock object", "delete it")
    assert s3_env.client().get_object(Bucket="hardening2", Key="idx-badlock/.lock")["Body"].read() == body


@pytest.mark.parametrize("value", ["abc", "-5", "0", "inf", "nan"])
def test_an_invalid_lock_lease_variable_is_one_line(tmp_path, capsys, monkeypatch, value):
    from pipelines.cli import main
    monkeypatch.setenv("RAGBEAM_INDEX_LOCK_LEASE_S", value)
    rc = main(["index", "--quiet", "--input", str(tmp_path), "--output", "s3://nowhere-h2/idx"])
    one_line_error(capsys, rc, f"RAGBEAM_INDEX_LOCK_LEASE_S={value!r}: expected a positive number of seconds")


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


def test_a_full_disk_is_one_line(tmp_path, capsys, monkeypatch):
    import errno

    import pipelines.answer
    from pipelines.cli import main

    def full(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "answers.jsonl.tmp"))
    monkeypatch.setattr(pipelines.answer, "run_answer", full)
    rc = main(["answer", "--index", str(tmp_path), "--questions", str(questions_file(tmp_path)),
               "--output", str(tmp_path / "answers.jsonl")])
    one_line_error(capsys, rc, "disk full", "answers.jsonl.tmp")
