"""Config and paths refused at load, with errors people can act on: duplicate YAML keys and
alias bombs, answer outputs that would destroy an input, settings that cannot work together,
Beam runners and options checked by Beam's parser, and one line (exit 2, no traceback) for a
denied listing, a bad lock lease variable or a full disk."""
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


@pytest.mark.parametrize("value", ["abc", "-5", "0", "inf", "nan"])
def test_an_invalid_lock_lease_variable_is_one_line(tmp_path, capsys, monkeypatch, value):
    from pipelines.cli import main
    monkeypatch.setenv("RAGBEAM_INDEX_LOCK_LEASE_S", value)
    rc = main(["index", "--quiet", "--input", str(tmp_path), "--output", "s3://nowhere-h2/idx"])
    one_line_error(capsys, rc, f"RAGBEAM_INDEX_LOCK_LEASE_S={value!r}: expected a positive number of seconds")


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


# --- settings that cannot work together, and any Beam runner, refused or accepted at load ---------

@pytest.mark.parametrize("text, message", [
    ("embed: {max_length: 16}", "chunk.chunk_tokens: chunk_tokens 200 + context_tokens 40 + 2 special tokens "
                                "= 242 exceeds embed.max_length 16"),
    ("chunk: {chunk_tokens: 254, context_tokens: 128}", "exceeds embed.max_length 256"),
    ("chunk: {chunk_tokens: 32, overlap_tokens: 32}", "chunk.overlap_tokens: 32 must be smaller"),
    ("answer: {kind: openai}", "answer.base_url: required when answer.kind is openai"),
    ("rerank: {kind: cross_encoder}", "rerank.model_dir: required"),
    ("gate: {dataset: /nonexistent/set}", "gate.dataset: directory not found"),
    ("rewrite: {kind: hyde}", "llm.base_url: required by rewrite.kind: hyde"),
    ("contextualize: {kind: llm}\nllm: {base_url: 'http://h:1/v1'}", "llm.model: required by contextualize.kind: llm"),
    ("judge: {max_questions: 5}\nllm: {base_url: 'ftp://u:pw@h/v1', model: m}", "llm.base_url: expected http"),
])
def test_settings_that_cannot_work_together_are_refused_at_load(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("+", r"\+").replace(".", r"\.")):
        load_config(write(tmp_path, text), environ={})


@pytest.mark.parametrize("text, message", [
    ("runner: {name: Nope}", "runner.name: unknown runner 'Nope'"),
    ("runner: {name: 'my.pkg.'}", "runner.name: not a runner name"),
    ("runner: {options: {direct_num_workers: abc}}", "runner.options.direct_num_workers: argument "
                                                     "--direct_num_workers: invalid int value"),
    ("runner: {options: {no_such_option: 1}}", "runner.options.no_such_option: not a Beam pipeline option"),
])
def test_runner_name_and_options_are_checked_by_beam_at_load(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(write(tmp_path, text), environ={})


def test_any_known_runner_or_a_runner_class_is_accepted(tmp_path):
    for name in ("DataflowRunner", "FlinkRunner", "PrismRunner", "direct",
                 "apache_beam.runners.direct.direct_runner.BundleBasedDirectRunner"):
        cfg = load_config(write(tmp_path, f"runner: {{name: {name}, options: {{streaming: true, "
                                          "project: p, flink_master: 'localhost:8081'}}"), environ={})
        assert cfg.runner.name == name
