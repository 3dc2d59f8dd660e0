"""Config validation: a bad line names its key and what was expected."""
import pytest

from configs.schema import DEFAULT_CONFIG, ConfigError, load_config


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_default_config_loads_and_runs_locally():
    cfg = load_config(DEFAULT_CONFIG, environ={})
    assert cfg.runner.name == "DirectRunner"
    assert cfg.runner.direct_running_mode == "in_memory"


@pytest.mark.parametrize("text, message", [
    ("chunk: {chunk_tokens: abc}", "chunk.chunk_tokens: Input should be a valid integer"),
    ("chunk: {chunk_tokenz: 3}", "chunk.chunk_tokenz: unknown key"),
    ("retrieve: {dense_top_n: 0}", "retrieve.dense_top_n: Input should be greater than or equal to 1"),
    ("runner: {name: Nope}", "runner.name: unknown runner 'Nope'"),
    ("embed: {model_path: /m.onnx}", "embed.model_sha256: required"),
    ("- a\n- b", "expected a mapping"),
    ("chunk: [", "not valid YAML"),
])
def test_bad_values_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(write(tmp_path, text), environ={})


def test_secrets_from_environment(tmp_path):
    p = write(tmp_path, "s3: {access_key_id: '${KEY}', secret_access_key: '${SECRET:-none}'}")
    cfg = load_config(p, environ={"KEY": "abc"})
    assert cfg.s3.access_key_id == "abc" and cfg.s3.secret_access_key == "none"
    with pytest.raises(ConfigError, match="s3.access_key_id: environment variable KEY is not set"):
        load_config(p, environ={})


def test_env_override_of_one_key(tmp_path):
    cfg = load_config(write(tmp_path, "chunk: {chunk_tokens: 120}"),
                      environ={"RAGBEAM__CHUNK__OVERLAP_TOKENS": "10"})
    assert (cfg.chunk.chunk_tokens, cfg.chunk.overlap_tokens) == (120, 10)
    with pytest.raises(ConfigError, match="chunk.nope: unknown key"):
        load_config(write(tmp_path, ""), environ={"RAGBEAM__CHUNK__NOPE": "1"})


def test_example_configs_validate(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("RAGBEAM_S3_ENDPOINT", "http://127.0.0.1:8333")
    for path in DEFAULT_CONFIG.parent.glob("*.yaml"):
        load_config(path)
