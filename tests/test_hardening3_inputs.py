"""Issue 35, items 13-18 and 20: every text encoding read or refused by name, size limits checked
before parsing, CSV quoting, Parquet question columns, and the answer job's output format and
command-line Beam options checked at start. Each test is about the class, not one file."""
from __future__ import annotations

import codecs
import csv
import io
import json
import re
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from transforms.common.decode import DecodeError, bom_encoding, decode_document, decode_lenient
from transforms.ingest.parse import ParseError, ParseFn, parse_object_with_errors
from transforms.ingest.parse.limits import ParseLimits
from transforms.records import RawObject, UniqueObject

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
C1 = re.compile("[\u0080-\u009f]")
BOMS = {"utf-8-sig": b"", "utf-16": b"", "utf-32": b"",
        "utf-16-le": codecs.BOM_UTF16_LE, "utf-16-be": codecs.BOM_UTF16_BE,
        "utf-32-le": codecs.BOM_UTF32_LE, "utf-32-be": codecs.BOM_UTF32_BE}


def _encode(text: str, encoding: str) -> bytes:
    return BOMS[encoding] + text.encode(encoding)


def _raw(key: str, data: bytes) -> RawObject:
    return RawObject.from_bytes(f"file:///corpus/{key}", key, data)


def _texts(docs) -> list[str]:
    return [s.text for d in docs for s in d.sections]


# Words of text a document may hold: letters from several scripts, no control characters.
WORD = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd"), max_codepoint=0x2FFFF),
               min_size=1, max_size=12)
PARAGRAPHS = st.lists(st.lists(WORD, min_size=1, max_size=8).map(" ".join), min_size=1, max_size=5)


# --- item 13: UTF-16 / UTF-32 by their byte order mark --------------------------------------

@SETTINGS
@given(paras=PARAGRAPHS, encoding=st.sampled_from(sorted(BOMS)),
       ext=st.sampled_from(["txt", "md", "html", "jsonl"]))
def test_a_file_with_a_byte_order_mark_reads_as_its_utf8_twin(paras, encoding, ext):
    if ext == "html":
        text = "<html><body>" + "".join(f"<p>{p}</p>" for p in paras) + "</body></html>\n"
    elif ext == "jsonl":
        text = "".join(json.dumps({"id": f"r{i}", "text": p}, ensure_ascii=False) + "\n" for i, p in enumerate(paras))
    else:
        text = "\n\n".join(paras) + "\n"
    utf8 = parse_object_with_errors(_raw(f"a.{ext}", text.encode("utf-8")))
    wide = parse_object_with_errors(_raw(f"a.{ext}", _encode(text, encoding)))
    assert _texts(wide[0]) == _texts(utf8[0]) and wide[1] == utf8[1] == []
    assert [d.format for d in wide[0]] == [d.format for d in utf8[0]]


@SETTINGS
@given(body=st.binary(min_size=1, max_size=64), encoding=st.sampled_from(
    ["UTF-16-LE", "UTF-16-BE", "UTF-32-LE", "UTF-32-BE"]))
def test_a_file_its_byte_order_mark_cannot_decode_is_refused_naming_the_encoding(body, encoding):
    bom = {"UTF-16-LE": codecs.BOM_UTF16_LE, "UTF-16-BE": codecs.BOM_UTF16_BE,
           "UTF-32-LE": codecs.BOM_UTF32_LE, "UTF-32-BE": codecs.BOM_UTF32_BE}[encoding]
    data = bom + body
    try:
        text = codecs.decode(body, encoding.lower())
    except UnicodeDecodeError:
        text = None
    if text is None and encoding == "UTF-32-LE":
        return  # FF FE 00 00 may also be UTF-16-LE text starting with U+0000: tried as that
    if text is None:
        with pytest.raises(ParseError, match=f"not valid {encoding} text"):
            parse_object_with_errors(_raw("a.txt", data))
        with pytest.raises(DecodeError, match=encoding):
            decode_document(data)
    else:  # it decodes: a document, or refused for what it holds, never as "binary content: NUL"
        try:
            parse_object_with_errors(_raw("a.txt", data))
        except ParseError as e:
            assert "NUL bytes" not in str(e)


def _question_file(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


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


# --- item 14: cp1252, never C1 controls ------------------------------------------------------

CP1252_TEXT = st.text(alphabet=st.sampled_from(
    [chr(c) for c in range(0x20, 0x7F)] + list("€‚ƒ„…†‡ˆ‰Š‹ŒŽ‘’“”•–—˜™š›œžŸ") +
    [chr(c) for c in range(0xA0, 0x100)]), min_size=1, max_size=60)


@SETTINGS
@given(text=CP1252_TEXT)
def test_text_that_is_not_utf8_reads_as_cp1252(text):
    data = text.encode("cp1252")
    try:
        data.decode("utf-8")
        return  # valid UTF-8 is read as UTF-8
    except UnicodeDecodeError:
        pass
    assert decode_document(data) == text
    assert decode_lenient(data) == text


@SETTINGS
@given(data=st.binary(max_size=200))
def test_no_decoded_document_holds_a_c1_control_character(data):
    for head in (b"", codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE):
        try:
            text = decode_document(head + data)
        except DecodeError:
            continue
        assert not C1.search(text)


@SETTINGS
@given(words=st.lists(st.sampled_from(["price", "€5", "“quoted”", "it’s", "a—b", "naïve", "…", "Œuvre"]),
                      min_size=3, max_size=20))
def test_a_windows_1252_document_keeps_its_punctuation(words):
    text = " ".join(words) + "\n"
    for ext in ("txt", "md"):
        docs, _ = parse_object_with_errors(_raw(f"w.{ext}", text.encode("cp1252")))
        body = " ".join(_texts(docs))
        assert not C1.search(body)
        if not _utf8(text.encode("cp1252")):
            assert body == text.strip()


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_c1_characters_in_utf8_text_become_the_cp1252_characters_they_stood_for():
    docs, _ = parse_object_with_errors(_raw("m.txt", "a \u0093quoted\u0094 \u0080 5\n".encode("utf-8")))
    assert _texts(docs) == ["a “quoted” € 5"]


def test_a_question_line_that_is_not_utf8_reads_as_cp1252(tmp_path):
    from transforms.query.questions.read import read_questions
    line = '{"id": "q1", "question": "What does “glob” cost in €?"}\n'.encode("cp1252")
    uri = _question_file(tmp_path, "q.jsonl", line)
    (q,) = read_questions(uri)
    assert q.question == "What does “glob” cost in €?"
    uri = _question_file(tmp_path, "q.csv", "id,question\nq1,“glob” in €?\n".encode("cp1252"))
    (q,) = read_questions(uri)
    assert q.question == "“glob” in €?"


# --- item 15: man pages with a block that never ends -----------------------------------------

UNTERMINATED = st.sampled_from([".de XX\n.B inside", ".de1 YY", ".am ZZ", ".if n \\{\\\n.ds a b",
                                ".ie t \\{\\\n.ft B", ".EQ\ndelim $$", ".TS\nl l."])
LOWER_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=3, max_size=10)


@SETTINGS
@given(before=st.lists(LOWER_WORD, min_size=1, max_size=6), after=st.lists(LOWER_WORD, min_size=1, max_size=30),
       block=UNTERMINATED, sections=st.integers(1, 3))
def test_a_man_page_keeps_the_text_after_a_block_that_never_ends(before, after, block, sections):
    per = max(1, len(after) // sections)
    rest = "".join(f".SH PART{i}\n" + " ".join(after[i * per:(i + 1) * per] or ["tail"]) + "\n.PP\n"
                   for i in range(sections))
    rest += " ".join(after[sections * per:]) + "\n"
    page = f'.TH TOOL 1\n.SH NAME\ntool \\- {" ".join(before)}\n{block}\n{rest}'
    docs, _ = parse_object_with_errors(_raw("tool.1", page.encode()))
    words = set(" ".join(_texts(docs)).split())
    assert set(after) <= words
    assert {f"PART{i}" for i in range(sections)} <= {p for d in docs for s in d.sections for p in s.heading_path}


def test_a_terminated_macro_definition_is_still_skipped():
    page = ".TH TOOL 1\n.SH NAME\ntool \\- x\n.de XX\nsecretbody\n..\n.SH DESCRIPTION\nvisible\n"
    words = " ".join(_texts(parse_object_with_errors(_raw("tool.1", page.encode()))[0]))
    assert "visible" in words and "secretbody" not in words


# --- item 16: sizes checked before parsing ---------------------------------------------------

def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("key,make", [
    ("big.txt", lambda n: b"word " * (n // 5)),
    ("big.txt", lambda n: b"x" * n),  # one line
    ("big.md", lambda n: b"# T\n\n" + b"w" * n),
    ("big.1", lambda n: b".TH BIG 1\n.SH NAME\n" + b"w" * n),
    ("big.html", lambda n: b"<html><body><p>" + b"w " * (n // 2) + b"</p></body></html>"),
    ("big.txt", lambda n: codecs.BOM_UTF16_LE + ("w" * (n // 2)).encode("utf-16-le")),
    ("big.txt", lambda n: ("é" * (n // 2)).encode("utf-8")),
])
def test_a_file_far_past_max_text_chars_is_refused_before_parsing_in_bounded_memory(key, make):
    limit = 100_000
    data = make(40 * limit)  # 4 MB: 40x the cap (10x the most HTML may hold)
    raw = _raw(key, data)
    errors = []

    def parse():
        try:
            parse_object_with_errors(raw, limits=ParseLimits(max_text_chars=limit))
        except ParseError as e:
            errors.append(str(e))
    peak = _peak(parse)
    assert errors and "max_text_chars" in errors[0] and "before parsing" in errors[0]
    assert peak < 3 * 1024 * 1024, peak  # not a copy of the file: under 1x its size


def test_a_file_just_under_the_cap_is_still_parsed():
    limits = ParseLimits(max_text_chars=10_000)
    for key, data in (("ok.txt", "é" * 9_000), ("ok.html", "<p>" + "w " * 4_000 + "</p>" + "<b></b>" * 4_000)):
        docs, _ = parse_object_with_errors(_raw(key, data.encode()), limits=limits)
        assert docs


def _jsonl_unique(lines: int, bad_first: int = 0) -> UniqueObject:
    body = "".join("{broken\n" for _ in range(bad_first))
    body += "".join(json.dumps({"id": f"r{i}", "text": f"record {i} text"}) + "\n" for i in range(lines))
    raw = _raw("many.jsonl", body.encode())
    return UniqueObject(raw=raw, source_uris=(raw.uri,))


def _emitted(fn: ParseFn, unique: UniqueObject):
    import apache_beam as beam
    docs, dead = [], []
    for item in fn.process(unique):
        if isinstance(item, beam.pvalue.TaggedOutput):
            dead.append(item.value.reason)
        else:
            docs.append(item.doc_id)
    return docs, dead


def test_a_jsonl_file_of_many_records_is_emitted_as_it_is_parsed_not_held_whole():
    unique = _jsonl_unique(40_000)
    fn = ParseFn()

    def stream():
        for _ in fn.process(unique):
            pass
    peak = _peak(stream)
    held = _peak(lambda: fn.apply(unique, __import__("transforms.common.stage", fromlist=["Outputs"]).Outputs()))
    assert peak * 4 < held, (peak, held)  # the old stage held every Document until the file ended


def test_the_streamed_parse_stage_emits_what_the_whole_file_parse_does():
    from transforms.common.stage import Outputs
    for unique in (_jsonl_unique(50, bad_first=3), _jsonl_unique(0, bad_first=4), _jsonl_unique(5)):
        out = Outputs("parse", ParseFn().origin(unique))
        try:
            ParseFn().apply(unique, out)
            want = ([d.doc_id for d in out.main], [d.reason for d in out.of("dead_letter")])
        except ParseError as e:
            want = ([], [str(e)])
        assert _emitted(ParseFn(), unique) == want


# --- item 17: CSV quoting ----------------------------------------------------------------------

CSV_TEXT = st.text(alphabet=list("abcdefgh XYZ0123,;\"'\n?é"), min_size=1, max_size=60).filter(
    lambda s: s.strip())


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


# --- item 18: Parquet question files -----------------------------------------------------------

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


# --- item 20: output format and command-line Beam options, checked at start -------------------

@pytest.mark.parametrize("output,fmt_args", [
    ("x.jsonl", ["--format", "parquet"]), ("x.ndjson", ["--format", "parquet"]),
    ("x.parquet", ["--format", "jsonl"]), ("x.PQ", []), ("sub/answers.parquet", [])])
def test_an_output_named_for_the_other_format_is_refused_before_anything_runs(tmp_path, capsys, output, fmt_args):
    from pipelines.cli import main
    out = tmp_path / output
    code = main(["answer", "--index", str(tmp_path / "no-index"), "--questions", str(tmp_path / "q.jsonl"),
                 "--output", str(out), "--quiet"] + fmt_args)
    err = capsys.readouterr().err
    assert code == 2 and "is named like a" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.iterdir())


BAD_BEAM_ARGS = [["--direct_num_workers=-3"], ["--direct_num_workers", "0"], ["--direct_num_workers=100000"],
                 ["--direct_num_workers=many"], ["--direct_running_mode=fast"], ["--direct_num_workers"],
                 ["--not_a_beam_option=1"], ["stray-value"]]


@pytest.mark.parametrize("extra", BAD_BEAM_ARGS)
@pytest.mark.parametrize("command", ["index", "answer"])
def test_bad_beam_options_on_the_command_line_are_config_errors_at_start(tmp_path, capsys, extra, command):
    from pipelines.cli import main
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    if command == "index":
        argv = ["index", "--input", str(src), "--output", str(tmp_path / "idx"), "--quiet"]
    else:
        argv = ["answer", "--index", str(tmp_path / "idx"), "--questions", str(src / "q.jsonl"),
                "--output", str(tmp_path / "a.jsonl"), "--quiet"]
    assert main(argv + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error:") and "Traceback" not in err
    name = extra[0].split("=")[0]
    assert (name if name.startswith("--") else "unexpected argument") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # nothing written


def test_runner_options_in_the_config_are_held_to_the_same_bounds(tmp_path, capsys):
    from pipelines.cli import main
    cfg = tmp_path / "c.yaml"
    cfg.write_text("runner:\n  options:\n    direct_num_workers: -3\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("hello\n")
    assert main(["index", "--config", str(cfg), "--input", str(src), "--output", str(tmp_path / "idx"),
                 "--quiet"]) == 2
    assert "runner.options.direct_num_workers" in capsys.readouterr().err


def test_good_beam_options_still_pass():
    from configs.schema import Config
    from pipelines.options import beam_option_errors
    for extra in (["--direct_num_workers=2"], ["--direct_running_mode", "multi_threading"],
                  ["--runner", "DirectRunner"], ["--job_endpoint=localhost:8099"], ["--save_main_session"]):
        assert beam_option_errors(Config(), extra) == [], extra


C1_CHAR = st.integers(0x80, 0x9F)


@SETTINGS
@given(codes=st.lists(C1_CHAR, min_size=1, max_size=5), words=st.lists(LOWER_WORD, min_size=1, max_size=5),
       how=st.sampled_from(["html", "jsonl", "man", "utf8"]))
def test_no_parsed_document_holds_a_c1_control_character_whatever_put_it_there(codes, words, how):
    text = " ".join(words)
    if how == "html":
        key, data = "c.html", ("<html><body><h1>" + "".join(f"&#{c};" for c in codes) + "</h1><p>" + text +
                               "".join(f"&#{c};" for c in codes) + "</p></body></html>").encode()
    elif how == "jsonl":
        key, data = "c.jsonl", json.dumps({"id": "r", "title": "".join(map(chr, codes)),
                                           "text": text + "".join(map(chr, codes))}).encode() + b"\n"
    elif how == "man":
        key, data = "c.1", (".TH C 1\n.SH NAME" + "".join(f"\\N'{c}'" for c in codes) + "\n" + text +
                            "".join(f"\\N'{c}'" for c in codes) + "\n").encode()
    else:
        key, data = "c.txt", (text + "".join(map(chr, codes)) + "\n").encode("utf-8")
    docs, _ = parse_object_with_errors(_raw(key, data))
    for d in docs:
        assert not C1.search(d.title)
        for s in d.sections:
            assert not C1.search(s.text) and not any(C1.search(h) for h in s.heading_path)
