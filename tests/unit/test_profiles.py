"""Embedding profiles without their models: the namespace, the names the config knows, and set-up
refusing a model that is not the pinned file."""
import json

import pytest

from configs.schema import ConfigError, load_config
from transforms.ingest.embed import model_spec_from_config
from transforms.ingest.profiles import ModelNotInstalledError


def config(tmp_path, embed: dict):
    path = tmp_path / "ragbeam.yaml"
    path.write_text(json.dumps({"embed": embed}))
    return load_config(path, environ={})


def spec_of(tmp_path, **embed):
    return model_spec_from_config(config(tmp_path, embed))


def test_default_namespace_is_unchanged_and_fast_is_minilm(tmp_path):
    default = spec_of(tmp_path)
    assert default.namespace == "all-MiniLM-L6-v2-onnx-int8:8199be6f699a395f:mean:256"  # caches stay valid
    assert spec_of(tmp_path, profile="fast") == spec_of(tmp_path, profile="minilm") == default


@pytest.mark.parametrize("change", [{"pooling": "cls"}, {"query_prefix": "query: "},
                                    {"passage_prefix": "passage: "}, {"normalize": False},
                                    {"max_length": 512}])
def test_every_profile_setting_changes_the_namespace(tmp_path, change):
    assert spec_of(tmp_path, **change).namespace != spec_of(tmp_path).namespace


def test_the_config_knows_every_named_profile():
    import typing
    from configs.schema import EmbedProfileName
    from transforms.ingest.profiles import PROFILE_NAMES
    assert set(typing.get_args(EmbedProfileName)) == set(PROFILE_NAMES)


def test_unknown_profile_is_refused_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match="embed.profile"):
        config(tmp_path, {"profile": "gte-large"})


def test_a_profile_not_installed_names_make_models(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBEAM_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ModelNotInstalledError, match="make models"):
        spec_of(tmp_path, profile="bge-small")


def test_a_requantized_model_built_from_another_source_is_refused(tmp_path, monkeypatch):
    from transforms.ingest.profiles import model_dir
    monkeypatch.setenv("RAGBEAM_CACHE", str(tmp_path / "cache"))
    d = model_dir("minilm-q8")
    d.mkdir(parents=True)
    (d / "model.onnx").write_bytes(b"x")
    (d / "build.json").write_text(json.dumps({"model_sha256": "0" * 64, "source_sha256": "1" * 64}))
    with pytest.raises(ModelNotInstalledError, match="built from a model with sha256 111111"):
        spec_of(tmp_path, profile="minilm-q8")


def test_set_up_refuses_a_download_that_is_not_the_pinned_file(tmp_path):
    from infra.models.fetch_models import PinMismatchError, check_pin
    f = tmp_path / "model.onnx"
    f.write_bytes(b"tampered")
    with pytest.raises(PinMismatchError, match="refusing to install"):
        check_pin(f, "0" * 64, "bge-small model")
