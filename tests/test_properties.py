"""Property tests (hypothesis): arbitrary bytes, names and values never crash a parser, a
question reader or the config loader, and every input is accounted for."""
from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from transforms.query.records import InputError, Question

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

NAMES = st.sampled_from(["a.md", "a.html", "a.txt", "a.jsonl", "a.pdf", "a.3", "noext", "a.json", "x.htm",
                         "weird\udcffname.md", "dir/ünï.md", "a.gz"])


@SETTINGS
@given(data=st.binary(max_size=4000), name=NAMES)
def test_parsers_never_raise_anything_but_parse_error(data, name):
    from transforms.ingest.parse import ParseError, parse_object_with_errors
    from transforms.records import RawObject
    raw = RawObject.from_bytes("/c/" + name, name, data)
    try:
        docs, errors = parse_object_with_errors(raw, [raw.uri])
    except ParseError:
        return
    assert isinstance(docs, list) and isinstance(errors, list)
    for d in docs:
        assert isinstance(d.doc_id, str) and d.doc_id


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                           max_leaves=8)
RECORD = st.dictionaries(st.sampled_from(["id", "_id", "text", "title", "acl", "question", "filters", "x"]),
                         JSON_VALUES, max_size=6)


@SETTINGS
@given(lines=st.lists(st.one_of(RECORD.map(json.dumps), st.text(max_size=40)), max_size=20))
def test_jsonl_parser_accounts_for_every_line(lines):
    from transforms.ingest.parse import ParseError
    from transforms.ingest.parse.jsonl import parse_jsonl
    from transforms.records import RawObject
    lines = [ln.replace("\n", " ").replace("\r", " ") for ln in lines]
    data = "\n".join(lines).encode("utf-8", "surrogatepass")
    raw = RawObject.from_bytes("/c/a.jsonl", "a.jsonl", data)
    try:
        docs, errors = parse_jsonl(raw)
    except ParseError:
        return
    non_blank = sum(1 for ln in data.split(b"\n") if ln.rstrip(b"\r").strip())
    assert len(docs) + len(errors) == non_blank


@SETTINGS
@given(records=st.lists(st.one_of(RECORD, JSON_VALUES), max_size=15))
def test_jsonl_question_reader_accounts_for_every_line(tmp_path_factory, records):
    from transforms.query.questions.read import read_questions
    p = tmp_path_factory.mktemp("q") / "q.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = list(read_questions(str(p)))
    assert len(out) == len(records)
    for r in out:
        assert isinstance(r, Question) or (isinstance(r, InputError) and r.reason)
        if isinstance(r, Question):
            assert r.filters is None or isinstance(r.filters, dict)
            assert r.acl is None or all(isinstance(g, str) and g for g in r.acl)


@SETTINGS
@given(data=st.binary(max_size=3000))
def test_csv_and_jsonl_question_readers_never_raise_on_arbitrary_bytes(tmp_path_factory, data):
    from transforms.query.questions.read import read_questions
    d = tmp_path_factory.mktemp("q")
    for name in ("q.csv", "q.jsonl"):
        (d / name).write_bytes(data)
        for r in read_questions(str(d / name)):
            assert isinstance(r, (Question, InputError))


CELL = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30)


@SETTINGS
@given(rows=st.lists(st.tuples(CELL, CELL, CELL), min_size=1, max_size=12))
def test_well_formed_csv_gives_one_record_per_row(tmp_path_factory, rows):
    import csv
    from transforms.query.questions.read import read_questions
    p = tmp_path_factory.mktemp("q") / "q.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["id", "question", "filters"])
        w.writerows(rows)
    blank = sum(1 for r in rows if not any(c.strip() for c in r))
    out = list(read_questions(str(p)))
    # a row whose quoted text holds lines shaped like rows is reported line by line: never fewer
    assert len(out) >= len(rows) - blank


CONFIG_KEYS = st.sampled_from(["runner", "s3", "source", "acl", "chunk", "embed", "answer", "output",
                               "retrieve", "gate", "artifacts", "nope"])


@SETTINGS
@given(doc=st.dictionaries(CONFIG_KEYS, JSON_VALUES, max_size=4))
def test_config_loader_returns_a_config_or_a_config_error(tmp_path_factory, doc):
    from configs.schema import Config, ConfigError, load_config
    import yaml
    p = tmp_path_factory.mktemp("c") / "c.yaml"
    p.write_text(yaml.safe_dump(doc))
    try:
        assert isinstance(load_config(p, environ={}), Config)
    except ConfigError as e:
        assert str(e)


SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789#@ ", min_size=8, max_size=30).filter(
    lambda s: s.strip() == s and len(set(s)) > 4 and sum(c.isdigit() for c in s) >= 2)


@SETTINGS
@given(value=SECRET, var=st.sampled_from(["RAGBEAM__ANSWER__API_KEY", "RAGBEAM__S3__SECRET_ACCESS_KEY",
                                          "RAGBEAM__S3__ACCESS_KEY_ID"]))
def test_env_secrets_are_kept_verbatim_and_never_echoed(tmp_path_factory, value, var):
    from configs.schema import ConfigError, load_config
    import yaml
    p = tmp_path_factory.mktemp("c") / "c.yaml"
    p.write_text("")
    cfg = load_config(p, environ={var: value})
    section, key = [x.lower() for x in var.split("__")[1:]]
    assert getattr(getattr(cfg, section), key) == value  # a string, taken as written
    with pytest.raises(ConfigError) as e:  # another key is bad: the error never shows the secret
        load_config(p, environ={var: value, "RAGBEAM__CHUNK__CHUNK_TOKENS": "abc"})
    assert value not in str(e.value)
    p.write_text(yaml.safe_dump({section: {key: [value, {"x": value}]}}))
    with pytest.raises(ConfigError) as e:  # the secret itself is of the wrong type
        load_config(p, environ={})
    assert value not in str(e.value) and f"{section}.{key}" in str(e.value)


@SETTINGS
@given(name=st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\x00" not in b
                                                      and not b.startswith(b".")))
def test_any_local_file_name_is_listed_or_counted(tmp_path_factory, name):
    from transforms.ingest.read import list_objects
    d = tmp_path_factory.mktemp("names")
    try:
        with open(os.path.join(os.fsencode(d), name), "wb") as f:
            f.write(b"x")
    except OSError:
        return
    report: dict = {}
    listed = list_objects(str(d), report=report)
    assert len(listed) + sum(len(v) for v in report.values()) == 1
