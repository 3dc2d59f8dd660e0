"""The question file is looked at once: one format sniff and one stat per answer run, shared by
the whole-file check, the piece planner and the resume fingerprint."""
from __future__ import annotations

import json

import pytest

from transforms.query.questions.file import QuestionFile, QuestionFileError, inspect_question_file
from transforms.query.questions.pieces import plan_pieces
from tests.conftest import HOSTILE


def _write(path, n=3):
    path.write_text("".join(json.dumps({"id": f"q{i}", "question": f"what is {i}?"}) + "\n"
                            for i in range(n)), encoding="utf-8")
    return str(path)


def test_one_record_carries_format_size_and_version(tmp_path):
    qf = inspect_question_file(_write(tmp_path / "q.jsonl"))
    assert isinstance(qf, QuestionFile) and qf.fmt == "jsonl"
    assert qf.size == (tmp_path / "q.jsonl").stat().st_size
    assert qf.version()["questions_size"] == qf.size and qf.version()["questions_mtime"] == qf.mtime
    pieces, n = plan_pieces(qf)
    assert n == 3 and all(p["size"] == qf.size for p in pieces)


def test_parquet_row_groups_read_with_the_check(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    path = str(tmp_path / "q.parquet")
    pq.write_table(pa.table({"id": ["a", "b", "c"], "question": ["x?", "y?", "z?"]}), path, row_group_size=2)
    qf = inspect_question_file(path)
    assert qf.row_groups == (2, 1)
    pieces, n = plan_pieces(qf)
    assert n == 3 and [p["first_line"] for p in pieces] == [1, 3]


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.write_bytes(b""), "empty"),
    (lambda p: p.mkdir(), "directory"),
    (lambda p: None, "not found"),
    (lambda p: p.write_bytes(b"\x1f\x8b\x08rest"), "gzip"),
])
def test_whole_file_problems_are_refused_once(tmp_path, make, problem):
    path = tmp_path / "q.jsonl"
    make(path)
    with pytest.raises(QuestionFileError, match=problem):
        inspect_question_file(str(path))


def test_the_resume_fingerprint_holds_the_profiles_fit(tmp_path):
    # a shard answered under one profile's fusion and evidence fit is never reused under another's
    from configs.schema import load_config
    from pipelines.answer import run_fingerprint
    from transforms.query.questions.file import inspect_question_file
    qf = tmp_path / "q.jsonl"
    qf.write_text('{"id": "1", "question": "why?"}\n')
    q = inspect_question_file(str(qf))
    cfgs = [tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"]
    cfgs[0].write_text("")
    cfgs[1].write_text("retrieve: {fusion_alpha: 0.82, fusion_norm: bound}\nanswer: {threshold: 0.34, max_sentences: 3}\n")
    cfgs[2].write_text("answer: {threshold: 0.35}\n")
    a, b, c = (run_fingerprint(load_config(str(p), environ={}), "/idx/versions/v1", q) for p in cfgs)
    assert a == b  # the same values, set or left to the profile
    assert a != c
    from transforms.query.selection import default_model
    model = tmp_path / "m.yaml"  # a refitted answer selection never reuses shards answered under the old one
    model.write_text("answer: {selection: model}\n")
    m = default_model()
    for path in (model, cfgs[0]):  # the selection's model; the rules answers' confidence (the default)
        before = run_fingerprint(load_config(str(path), environ={}), "/idx/versions/v1", q)
        digest, m.digest = m.digest, "another fit"
        try:
            assert run_fingerprint(load_config(str(path), environ={}), "/idx/versions/v1", q) != before
        finally:
            m.digest = digest


@pytest.mark.parametrize("name, message", [
    ("missing.jsonl", "question file not found"),
    ("empty.jsonl", "question file is empty"),
    ("not_parquet.parquet", "not a readable Parquet file"),
    ("questions.txt", "cannot tell the question file format"),
])
def test_whole_file_problems_get_a_short_error_before_any_pipeline(tmp_path, capsys, name, message):
    from pipelines.cli import main
    src = HOSTILE / name
    q = tmp_path / name
    if src.exists():
        q.write_bytes(src.read_bytes())
    elif name.endswith(".txt"):
        q.write_text("id,question\n")
    out = tmp_path / "answers.jsonl"
    rc = main(["answer", "--index", str(tmp_path / "no-index"), "--questions", str(q), "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and "Traceback" not in err and len(err.splitlines()) <= 2
    assert not (tmp_path / "answers.jsonl.parts").exists()
