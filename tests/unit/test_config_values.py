"""Odd values are refused at load, naming where they came from, and never answered.

- inf, -inf and nan are refused for every float key (from YAML or from the environment), and a
  non-finite score anywhere in an answer makes it "not found", never "answered", with no NaN
  written.
- An error about a value an environment override set names the variable, not the config file;
  a malformed RAGBEAM__ variable (`RAGBEAM__=x`, an empty or odd part) is refused; an override is
  a string unless the key's type says otherwise."""
from __future__ import annotations

import json
import math
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from configs.schema import DEFAULT_CONFIG, Config, ConfigError, load_config


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def _float_keys(model=Config, prefix=()) -> list[tuple]:
    out = []
    for name, field in model.model_fields.items():
        args = (field.annotation, *typing.get_args(field.annotation))
        sub = next((a for a in args if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if sub is not None and typing.get_origin(field.annotation) is not list:
            out += _float_keys(sub, prefix + (name,))
        elif float in args:
            out.append(prefix + (name,))
    return out


FLOAT_KEYS = _float_keys()
# YAML's spellings and the strings an environment variable carries
NON_FINITE_YAML = [".inf", "-.inf", ".nan", ".NaN", "+.INF", "1e400", "-1.0e+999", "'inf'", "'nan'", "'-Infinity'"]
NON_FINITE_ENV = ["inf", "-inf", "nan", "NaN", "Infinity", "-INF", "+inf", "1e400", "-1e999"]


def test_the_schema_has_the_float_keys_the_issue_names():
    assert {("retrieve", "bm25_k1"), ("retrieve", "dense_weight"), ("retrieve", "bm25_weight"),
            ("rerank", "chunk_weight"), ("llm", "budget_s"), ("answer", "budget_s")} <= set(FLOAT_KEYS)
    assert len(FLOAT_KEYS) >= 25


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(FLOAT_KEYS), value=st.sampled_from(NON_FINITE_YAML))
def test_property_a_non_finite_float_in_yaml_is_refused_naming_its_key(tmp_path, key, value):
    text = value
    for part in reversed(key[1:]):
        text = f"{{{part}: {text}}}"
    text = f"{key[0]}: {text}"
    if key[0] == "gate":
        text = f"gate: {{dataset: {tmp_path}, {key[-1]}: {value}}}"
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, text), environ={})
    assert f"{'.'.join(key)}: " in str(e.value) and "finite" in str(e.value), str(e.value)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from([k for k in FLOAT_KEYS if k[0] != "gate" and len(k) == 2]),
       value=st.sampled_from(NON_FINITE_ENV))
def test_property_a_non_finite_float_from_the_environment_is_refused_naming_the_variable(key, value):
    var = "RAGBEAM__" + "__".join(p.upper() for p in key)
    with pytest.raises(ConfigError) as e:
        load_config(environ={var: value})
    msg = str(e.value)
    assert msg.startswith(f"environment variable {var}: {'.'.join(key)}: ") and "finite" in msg, msg
    assert str(DEFAULT_CONFIG) not in msg


def test_finite_values_at_the_bounds_still_load(tmp_path):
    cfg = load_config(write(tmp_path, "retrieve: {bm25_k1: 1e300, dense_weight: 0, bm25_weight: 1e10}\n"
                                      "llm: {budget_s: 1e9}\nrerank: {chunk_weight: 2.5}"), environ={})
    assert cfg.retrieve.bm25_k1 == 1e300 and cfg.llm.budget_s == 1e9


# --- a non-finite score means "not found" ------------------------------------------------------

def _record(**kw):
    from transforms.query.records import AnswerRecord
    base = dict(id="q1", question="q?", answer="It is 42 [1].", status="answered", evidence_score=0.9,
                citations=[{"n": 1, "chunk_id": "c1", "source": "a.html"}],
                retrieved=[{"rank": 1, "doc_id": "d", "chunk_id": "c1", "source": "a.html", "score": 0.8}],
                retrieved_docs=[{"rank": 1, "doc_id": "d", "score": 0.8}])
    base.update(kw)
    return AnswerRecord(**base)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["evidence", "retrieved", "retrieved_docs"])
def test_a_non_finite_score_anywhere_is_not_found_and_never_written(bad, where):
    from transforms.query.finite import finite_or_not_found
    kw = {"evidence": dict(evidence_score=bad),
          "retrieved": dict(retrieved=[{"rank": 1, "doc_id": "d", "chunk_id": "c1", "source": "a", "score": bad}]),
          "retrieved_docs": dict(retrieved_docs=[{"rank": 1, "doc_id": "d", "score": bad}])}[where]
    rec = finite_or_not_found(_record(**kw))
    assert rec.status == "not_found" and rec.citations == [] and "42" not in rec.answer
    json.dumps(rec.to_row(), allow_nan=False)  # no NaN or Infinity in the answer file


def test_a_finite_record_is_left_as_it_is():
    from transforms.query.finite import finite_or_not_found
    rec = _record()
    before = rec.to_row()
    assert finite_or_not_found(rec).to_row() == before


@settings(max_examples=100, deadline=None)
@given(scores=st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=12),
       evidence=st.floats(allow_nan=True, allow_infinity=True))
def test_property_answered_only_with_every_score_finite(scores, evidence):
    from transforms.query.finite import finite_or_not_found
    rec = finite_or_not_found(_record(evidence_score=evidence, retrieved=[
        {"rank": i + 1, "doc_id": "d", "chunk_id": f"c{i}", "source": "a", "score": s} for i, s in enumerate(scores)]))
    finite = math.isfinite(evidence) and all(math.isfinite(s) for s in scores)
    assert (rec.status == "answered") == finite
    json.dumps(rec.to_row(), allow_nan=False)


# --- environment overrides ------------------------------------------------------------------------

@pytest.mark.parametrize("var, value, key", [
    ("RAGBEAM__CHUNK__OVERLAP_TOKENS", "300", "chunk.overlap_tokens"),
    ("RAGBEAM__RETRIEVE__FUSION", "nope", "retrieve.fusion"),
    ("RAGBEAM__LLM__NO_SUCH_KEY", "x", "llm.no_such_key"),
    ("RAGBEAM__LLM__BASE_URL", "ftp://h/v1", "llm.base_url"),
    ("RAGBEAM__CHUNK__CHUNK_TOKENS", "254", "chunk.chunk_tokens"),
    ("RAGBEAM__ACL", '[{"prefix": "a/", "groups": []}]', "acl.0.groups"),
])
def test_an_error_about_an_overridden_value_names_the_variable(var, value, key):
    env = {var: value}
    if var == "RAGBEAM__CHUNK__CHUNK_TOKENS":
        env["RAGBEAM__CHUNK__CONTEXT_TOKENS"] = "128"
    with pytest.raises(ConfigError) as e:
        load_config(environ=env)
    msg = str(e.value)
    assert f"environment variable " in msg and key in msg and str(DEFAULT_CONFIG) not in msg, msg
    assert any(line.startswith(f"environment variable {v}: ") for line in msg.splitlines() for v in env), msg


def test_an_error_in_the_file_still_names_the_file(tmp_path):
    p = write(tmp_path, "chunk: {overlap_tokens: 300}")
    with pytest.raises(ConfigError) as e:
        load_config(p, environ={"RAGBEAM__LLM__MODEL": "m"})
    assert str(e.value).startswith(f"{p}: chunk.overlap_tokens: ")


@pytest.mark.parametrize("name", ["RAGBEAM__", "RAGBEAM____", "RAGBEAM__LLM__", "RAGBEAM__LLM____MODEL",
                                  "RAGBEAM____LLM__MODEL", "RAGBEAM__LLM__MODEL_", "RAGBEAM__LLM___MODEL",
                                  "RAGBEAM__LLM__MO-DEL", "RAGBEAM__LLM__MO DEL", "RAGBEAM__1LLM__MODEL"])
def test_a_malformed_ragbeam_variable_is_refused_naming_it(name):
    with pytest.raises(ConfigError) as e:
        load_config(environ={name: "x"})
    assert str(e.value).startswith(f"environment variable {name}: not a config override"), str(e.value)


_part = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,6}(_[A-Za-z0-9]{1,4}){0,2}", fullmatch=True)
_bad_part = st.one_of(st.just(""), _part.map(lambda p: p + "_"), _part.map(lambda p: "_" + p),
                      st.from_regex(r"[A-Za-z]{1,4}[^A-Za-z0-9_][A-Za-z]{0,4}", fullmatch=True))


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(_part, min_size=0, max_size=3), bad=_bad_part, at=st.integers(0, 3))
def test_property_any_malformed_name_is_refused_never_ignored(parts, bad, at):
    parts = list(parts)
    parts.insert(min(at, len(parts)), bad)
    name = "RAGBEAM__" + "__".join(parts)
    with pytest.raises(ConfigError) as e:
        load_config(environ={name: "x"})
    assert f"environment variable {name}" in str(e.value)


def test_well_formed_overrides_still_apply_and_other_variables_are_ignored():
    cfg = load_config(environ={"RAGBEAM__LLM__MODEL": "m", "RAGBEAM__retrieve__BM25_K1": "1.5",
                               "RAGBEAM_INDEX_LOCK_LEASE_S": "30", "RAGBEAMX": "y"})
    assert cfg.llm.model == "m" and cfg.retrieve.bm25_k1 == 1.5


def test_the_cli_prints_the_variable(tmp_path, capsys, monkeypatch):
    from pipelines.cli import main
    monkeypatch.setenv("RAGBEAM__RETRIEVE__BM25_K1", "nan")
    assert main(["answer", "--index", str(tmp_path), "--questions", str(tmp_path / "q.jsonl"),
                 "--output", str(tmp_path / "a.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "environment variable RAGBEAM__RETRIEVE__BM25_K1: retrieve.bm25_k1" in err
    assert "default.yaml" not in err
    monkeypatch.delenv("RAGBEAM__RETRIEVE__BM25_K1")
    monkeypatch.setenv("RAGBEAM__", "x")
    assert main(["answer", "--index", str(tmp_path), "--questions", str(tmp_path / "q.jsonl"),
                 "--output", str(tmp_path / "a.jsonl")]) == 2
    assert "environment variable RAGBEAM__: not a config override" in capsys.readouterr().err


def test_environment_overrides_are_strings_unless_the_type_says_otherwise(tmp_path):
    p = write(tmp_path, "")
    cfg = load_config(p, environ={"RAGBEAM__ANSWER__API_KEY": "abc #def", "RAGBEAM__S3__REGION": "null",
                                  "RAGBEAM__S3__SECRET_ACCESS_KEY": "80412345678",
                                  "RAGBEAM__CHUNK__OVERLAP_TOKENS": "10",
                                  "RAGBEAM__SOURCE__FULL_HASH": "true",
                                  "RAGBEAM__ACL": '[{"prefix": "a/", "groups": ["g"]}]'})
    assert cfg.answer.api_key == "abc #def" and cfg.s3.region == "null"
    assert cfg.s3.secret_access_key == "80412345678"
    assert cfg.chunk.overlap_tokens == 10 and cfg.source.full_hash is True and cfg.acl[0].groups == ["g"]
