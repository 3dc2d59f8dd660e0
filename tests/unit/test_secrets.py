"""Secrets are never written out.

1. Every secret key the schema declares (or names like a credential) and every URL credential
   is masked wherever config is written (manifest.json, the eval report's report.json and
   report.html), by one mechanism read off the schema: a new secret key is masked without
   anyone listing it.
2. Configured secret values are redacted from every message that leaves the process: answer
   records and their shards (an LLM server that quotes the key back in a 401), dead letters,
   logs, the CLI's printed errors and the exceptions it lets out, also on a worker that only
   unpickled the config.
"""
from __future__ import annotations

import json
import logging
import sys
from typing import Any, Optional

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from configs.schema import Config, load_config
from configs.schema import ConfigError
from transforms.common import redact

MASK = "***"

LLM_KEY = "sk-llm-h3-Zq81vXw0"
ANSWER_KEY = "sk-answer-h3-Pp41mL7"
URL_PASSWORD = "urlpw-h3-Gh72kd"
S3_SECRET = "s3secret-h3-Yy33aa"
OPTION_PASSWORD = "optpw-h3-Rt55qq"


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


SECRET_YAML = f"""
s3: {{access_key_id: AKIA-h3-KEYID99, secret_access_key: {S3_SECRET}}}
llm: {{base_url: 'http://bob:{URL_PASSWORD}@127.0.0.1:9/v1', model: tiny}}
answer: {{api_key: {ANSWER_KEY}}}
runner: {{options: {{s3_secret_access_key: {OPTION_PASSWORD}, temp_location: 'file:///tmp/x'}}}}
"""
SECRETS = (LLM_KEY, ANSWER_KEY, URL_PASSWORD, S3_SECRET, OPTION_PASSWORD, "AKIA-h3-KEYID99")


# --- one schema-keyed mechanism -------------------------------------------------------------------

def test_llm_api_key_url_password_and_s3_keys_are_masked_in_the_written_config(tmp_path):
    from transforms.index.manifest import manifest_config
    cfg = load_config(write(tmp_path, SECRET_YAML), environ={"RAGBEAM__LLM__API_KEY": LLM_KEY})
    assert cfg.llm.api_key == LLM_KEY  # the config itself keeps it: only what is written is masked
    written = manifest_config(cfg)
    text = json.dumps(written)
    for secret in SECRETS:
        assert secret not in text, secret
    assert written["llm"]["api_key"] == MASK and written["answer"]["api_key"] == MASK
    assert written["s3"]["secret_access_key"] == MASK and written["s3"]["access_key_id"] == MASK
    assert written["llm"]["base_url"] == "http://***@127.0.0.1:9/v1"
    assert written["runner"]["options"] == {"s3_secret_access_key": MASK, "temp_location": "file:///tmp/x"}
    assert written["answer"]["kind"] == "extractive" and written["llm"]["model"] == "tiny"  # the rest as it is
    unset = manifest_config(load_config(environ={}))
    assert unset["llm"]["api_key"] is None  # an unset secret stays visibly unset


def test_the_secret_keys_are_read_off_the_schema():
    expected = {("s3", "access_key_id"), ("s3", "secret_access_key"), ("answer", "api_key"), ("llm", "api_key")}
    assert expected <= redact.SECRET_KEYS
    for section, field in Config.model_fields.items():  # every key hidden from reprs is a secret key
        sub = redact._sub_model(field.annotation)
        for name, f in (sub.model_fields.items() if sub else ()):
            if f.repr is False:
                assert (section, name) in redact.SECRET_KEYS, (section, name)


class _NewSection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    endpoint: Optional[str] = None
    session_token: Optional[str] = None  # named like a credential, not marked
    vault_password: Optional[str] = None
    bearer: Optional[str] = Field(None, json_schema_extra={"secret": True})  # marked, innocuous name
    hidden: Optional[str] = Field(None, repr=False)  # hidden from reprs
    max_tokens: int = 512  # counts tokens: not a secret
    extra: dict[str, Any] = Field(default_factory=dict)


class _FutureConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    future: _NewSection = _NewSection()
    items: list[_NewSection] = Field(default_factory=list)


def test_a_new_secret_key_is_masked_without_anyone_listing_it():
    sec = _NewSection(endpoint="https://u:pw-new-1234@h/x", session_token="tok-new-5678", vault_password="vault-9012",
                      bearer="bear-3456", hidden="hide-7890", extra={"db_password": "dbpw-1111", "host": "h"})
    out = redact.mask_config(_FutureConfig(future=sec, items=[sec]))
    text = json.dumps(out)
    for secret in ("pw-new-1234", "tok-new-5678", "vault-9012", "bear-3456", "hide-7890", "dbpw-1111"):
        assert secret not in text, secret
    for got in (out["future"], out["items"][0]):
        assert got["max_tokens"] == 512 and got["extra"]["host"] == "h"
        assert got["session_token"] == got["bearer"] == got["hidden"] == got["vault_password"] == MASK
    secrets, mappings = redact.secret_paths(_FutureConfig)
    assert ("future", "session_token") in secrets and ("future", "max_tokens") not in secrets
    assert ("future", "extra") in mappings


_secret_text = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="@/?#:%"),
                       min_size=8, max_size=40).filter(lambda s: s.strip() == s and not s.startswith(("$", "{")))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=_secret_text, password=_secret_text, s3=_secret_text)
def test_property_no_secret_value_reaches_the_written_config(tmp_path, key, password, s3):
    env = {"RAGBEAM__LLM__API_KEY": key, "RAGBEAM__ANSWER__API_KEY": key,
           "RAGBEAM__LLM__BASE_URL": f"https://user:{password}@llm.example:8443/v1",
           "RAGBEAM__ANSWER__BASE_URL": f"http://x:{password}@h/v1",
           "RAGBEAM__S3__SECRET_ACCESS_KEY": s3, "RAGBEAM__S3__ACCESS_KEY_ID": s3}
    from transforms.index.manifest import manifest_config
    text = json.dumps(manifest_config(load_config(environ=env)))
    placeholders = {k: v.replace(key, "K").replace(password, "P").replace(s3, "S") for k, v in env.items()}
    baseline = json.dumps(manifest_config(load_config(environ=placeholders)))
    for secret in (key, password, s3):
        assume(secret not in baseline and json.dumps(secret)[1:-1] not in baseline)  # e.g. "max_leng"
        assert secret not in text and json.dumps(secret)[1:-1] not in text


# --- secret values redacted from every message ----------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(key=_secret_text)
def test_property_any_key_the_client_holds_is_masked_in_its_errors(key):
    from transforms.common.chat import BackendError, OpenAICompatibleClient
    client = OpenAICompatibleClient("http://127.0.0.1:9/v1", "m", api_key=key, timeout=0.2, retries=0)
    err = redact.redact_exception(BackendError(f"HTTP 401 from x: bad key {key!s} (quoted: '{key}')"),
                                  client._secrets)
    assert key not in str(err) and MASK in str(err)


def test_dead_letters_logs_cli_errors_and_exceptions_are_redacted(tmp_path, capsys, monkeypatch):
    from pipelines import cli
    from transforms.common.stage import StageFn
    key = "sk-everywhere-h3-5150z"
    cfg_path = write(tmp_path, "llm: {base_url: 'http://127.0.0.1:9/v1'}\n")

    def leaky(args):
        cfg = load_config(cfg_path, environ={"RAGBEAM__LLM__API_KEY": key})
        logging.getLogger("ragbeam.test").warning("server said: bad key %s", cfg.llm.api_key)
        print(f"error: the server rejected {cfg.llm.api_key}", file=sys.stderr)
        print(f"progress with {cfg.llm.api_key}")
        raise RuntimeError(f"unexpected reply quoting {cfg.llm.api_key}")

    monkeypatch.setattr(cli, "_answer", leaky)
    with pytest.raises(RuntimeError) as e:
        cli.main(["answer", "--index", str(tmp_path), "--questions", "q.jsonl", "--output", str(tmp_path / "o")])
    printed = capsys.readouterr()
    assert key not in str(e.value) and MASK in str(e.value)
    assert key not in printed.out + printed.err and "rejected ***" in printed.err and "progress with ***" in printed.out
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "bad key %s", (key,), None)
    assert redact.redact_log_record(record) and key not in record.getMessage()
    # a dead letter's reason
    assert key not in StageFn.reason(None, ValueError(f"parse failed near {key}"))


def test_short_values_are_not_searched_for_in_free_text():
    """A secret shorter than MIN_SECRET_CHARS would mask ordinary words: it is masked where
    config is written, never searched for in messages."""
    redact.register_secret_values(["none"])
    assert redact.redact_text("matched none of them") == "matched none of them"


def test_a_summary_written_beside_a_version_holds_no_secret(tmp_path):
    """summary.json goes through redact_values: every string masked, keys kept."""
    key = "sk-summary-h3-4411k"
    load_config(environ={"RAGBEAM__LLM__API_KEY": key})
    summary = {"input": "s3://ak:" + URL_PASSWORD + "@bucket/docs", "chunk_tokens": 200,
               "warnings": [f"contexts failed: server said {key}"], "nested": {"why": key}}
    got = redact.redact_values(summary)
    text = json.dumps(got)
    assert key not in text and URL_PASSWORD not in text
    assert got["chunk_tokens"] == 200 and got["input"] == "s3://***@bucket/docs" and set(got) == set(summary)


def test_secret_values_are_never_echoed_in_config_errors(tmp_path):
    for var, key in (("RAGBEAM__ANSWER__API_KEY", "answer.api_key"),
                     ("RAGBEAM__S3__SECRET_ACCESS_KEY", "s3.secret_access_key")):
        with pytest.raises(ConfigError) as e:
            load_config(write(tmp_path, "answer: {api_key: [80412345678]}\ns3: {secret_access_key: [80412345678]}"),
                        environ={})
        assert "80412345678" not in str(e.value) and "value hidden" in str(e.value)
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "runner: {options: {sdk_container_password: [hunter22]}}"), environ={})
    assert "hunter22" not in str(e.value)
