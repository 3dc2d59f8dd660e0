"""Question files by format: encodings (a byte order mark, UTF-16/32 refused, cp1252 lines), CSV
quoting and fields, Parquet question columns: each row gives one record or one error that keeps
its id."""
from __future__ import annotations

import codecs
import csv
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.conftest import HOSTILE
from tests.unit.test_text_decoding import _encode
from transforms.query.records import InputError, Question

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
BOMS = {"utf-8-sig": b"", "utf-16": b"", "utf-32": b"",
        "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE, "utf-32-be": codecs.BOM_UTF32_BE}


def _question_file(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


CSV_TEXT = st.text(alphabet=list("abcdefgh XYZ0123,;\"'\n?é"), min_size=1, max_size=60).filter(
    lambda s: s.strip())


def _errors_by_id(recs):
    return {r.id: r for r in recs if isinstance(r, InputError)}


@pytest.mark.parametrize("encoding", sorted(BOMS.keys() - {"utf-8-sig"}) + ["utf-16-le-no-bom"])
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_utf16_or_utf32_question_file_is_refused_whole_naming_its_encoding(tmp_path, encoding, fmt):
    from transforms.query.questions.file import QuestionFileError, inspect_question_file
    text = ('{"id": "q1", "question": "What is glob?"}\n{"id": "q2", "question": "What is fnmatch?"}\n'
            if fmt == "jsonl" else "id,question\nq1,What is glob?\nq2,What is fnmatch?\n")
    data = text.encode("utf-16-le") if encoding.endswith("no-bom") else _encode(text, encoding)
    uri = _question_file(tmp_path, f"q.{fmt}", data)
    with pytest.raises(QuestionFileError, match=r"UTF-(16|32)") as e:
        inspect_question_file(uri)
    assert "iconv" in str(e.value)


def test_a_utf8_question_file_with_a_byte_order_mark_is_still_read(tmp_path):
    from transforms.query.questions.file import inspect_question_file
    from transforms.query.questions.read import read_questions
    uri = _question_file(tmp_path, "q.csv", "id,question\nq1,What is glob?\n".encode("utf-8-sig"))
    inspect_question_file(uri)
    assert [(q.id, q.question) for q in read_questions(uri)] == [("q1", "What is glob?")]


def test_a_question_line_that_is_not_utf8_reads_as_cp1252(tmp_path):
    from transforms.query.questions.read import read_questions
    line = '{"id": "q1", "question": "What does “glob” cost in €?"}\n'.encode("cp1252")
    uri = _question_file(tmp_path, "q.jsonl", line)
    (q,) = read_questions(uri)
    assert q.question == "What does “glob” cost in €?"
    uri = _question_file(tmp_path, "q.csv", "id,question\nq1,“glob” in €?\n".encode("cp1252"))
    (q,) = read_questions(uri)
    assert q.question == "“glob” in €?"


@SETTINGS
@given(questions=st.lists(CSV_TEXT, min_size=1, max_size=10), extra=st.booleans(),
       quoting=st.sampled_from([csv.QUOTE_MINIMAL, csv.QUOTE_ALL, csv.QUOTE_NONNUMERIC]))
def test_a_well_formed_csv_question_file_gives_each_row_as_written(tmp_path_factory, questions, extra, quoting):
    from transforms.query.questions.read import read_questions
    p = tmp_path_factory.mktemp("q") / "q.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, quoting=quoting)
        w.writerow(["id", "question"] + (["note"] if extra else []))
        for i, q in enumerate(questions):
            w.writerow([f"q{i}", q] + (["n,1"] if extra else []))
    got = list(read_questions(str(p)))
    assert [(r.id, getattr(r, "question", None)) for r in got] == [(f"q{i}", q.strip())
                                                                   for i, q in enumerate(questions)]


@SETTINGS
@given(before=st.lists(CSV_TEXT, max_size=4), after=st.lists(st.sampled_from(
    ["What is glob?", "x,y", "a, b, c", "plain"]), min_size=0, max_size=5))
def test_a_quote_that_never_closes_is_the_one_error_and_every_row_is_accounted_for(
        tmp_path_factory, before, after):
    from transforms.query.questions.read import read_questions
    from transforms.query.records import InputError
    p = tmp_path_factory.mktemp("q") / "q.csv"
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "question"])
    for i, q in enumerate(before):
        w.writerow([f"b{i}", q])
    text = buf.getvalue().replace("\r\n", "\n") + 'bad,"this quote never closes\n'
    text += "".join(f"a{i},{q}\n" for i, q in enumerate(after))
    p.write_text(text, encoding="utf-8")
    got = list(read_questions(str(p)))
    assert [(r.id, r.question) for r in got[:len(before)]] == [(f"b{i}", q.strip()) for i, q in enumerate(before)]
    bad = got[len(before)]
    assert bad.id == "bad" and "unclosed quote" in bad.reason
    assert all(isinstance(r, InputError) for r in got[len(before):])
    shaped = [f"a{i}" for i, q in enumerate(after) if q.count(",") == 0]  # id,question: one comma
    assert [r.id for r in got[len(before) + 1:]] == shaped


@pytest.mark.parametrize("typ", [pa.int8(), pa.int32(), pa.int64(), pa.uint16(), pa.float64(),
                                 pa.decimal128(10, 0)])
def test_a_numeric_parquet_question_column_is_read_as_text(tmp_path, typ):
    from transforms.query.questions.file import inspect_question_file
    from transforms.query.questions.pieces import plan_pieces, read_piece
    from transforms.query.questions.read import read_questions
    import decimal
    values = [42, 7, None] if not pa.types.is_decimal(typ) else [decimal.Decimal(42), decimal.Decimal(7), None]
    path = tmp_path / "q.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "question": pa.array(values, typ)}), path)
    qfile = inspect_question_file(str(path))
    pieces, _ = plan_pieces(qfile)
    for got in (list(read_questions(str(path))), [r for p in pieces for r in read_piece(p)]):
        assert [(r.id, getattr(r, "question", None)) for r in got[:2]] == [("a", "42"), ("b", "7")]
        assert "missing or empty question" in got[2].reason


@pytest.mark.parametrize("columns", [{"question": ["q?"]}, {"ident": ["a"], "question": ["q?"]},
                                     {"text": ["q?"], "qid": [1]}])
def test_a_parquet_question_file_without_an_id_column_is_refused_whole(tmp_path, columns):
    from transforms.query.questions.file import QuestionFileError, inspect_question_file
    path = tmp_path / "q.parquet"
    pq.write_table(pa.table(columns), path)
    with pytest.raises(QuestionFileError, match="no `id` column"):
        inspect_question_file(str(path))
    pq.write_table(pa.table({**columns, "_id": ["x"]}), path)
    inspect_question_file(str(path))


def test_a_csv_field_over_128_kib_is_one_error_record(tmp_path):
    from transforms.query.questions.read import read_questions
    p = tmp_path / "q.csv"
    with open(p, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "question"])
        w.writerow(["q1", "What is glob?"])
        w.writerow(["big", "x" * (200 * 1024)])
        w.writerow(["q3", "What is json?"])
    recs = list(read_questions(str(p)))
    assert [r.id for r in recs if isinstance(r, Question)] == ["q1", "q3"]
    (err,) = [r for r in recs if isinstance(r, InputError)]
    assert err.id == "big" and "longer than 131072" in err.reason


def test_unreadable_csv_filters_keep_the_id(tmp_path):
    from transforms.query.questions.read import read_questions
    p = tmp_path / "q.csv"
    p.write_text('id,question,filters,acl\nq1,What?,{not json,\nq2,What?,,\n')
    recs = list(read_questions(str(p)))
    assert recs[0].id == "q1" and "filters is not valid JSON" in recs[0].reason
    assert isinstance(recs[1], Question)


def test_an_unclosed_quote_is_reported_and_every_row_is_accounted_for():
    from transforms.query.questions.read import read_questions
    recs = list(read_questions(str(HOSTILE / "unclosed_quote.csv")))
    assert len(recs) == 3  # three data rows in, three records out
    by_id = _errors_by_id(recs)
    assert "unclosed quote" in by_id["q1"].reason
    assert "swallowed by an unclosed quote on line 2" in by_id["q2"].reason
    assert [r.line for r in recs] == [2, 3, 4]
