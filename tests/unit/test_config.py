"""Config validation: a bad line names its key and what was expected."""
import re

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


@pytest.mark.parametrize("text, message", [
    ("retrieve: {dense_topn: 3}", "retrieve.dense_topn: unknown key; did you mean 'dense_top_n'?"),
    ("anwser: {kind: extractive}", "anwser: unknown key; did you mean 'answer'?"),
    ("acl: [{prefx: hr/, groups: [hr]}]", "acl.0.prefx: unknown key; did you mean 'prefix'?"),
    ("gate: {dataset: /tmp, metrik: ndcg@10}", "gate.metrik: unknown key; did you mean 'metric'?"),
])
def test_an_unknown_key_is_refused_with_the_nearest_known_name(tmp_path, text, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
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


def test_answer_threshold_defaults_to_the_tuned_value_of_its_evidence_kind(tmp_path):
    # the two evidence scores live on different scales: one default threshold would not fit both
    assert load_config(write(tmp_path, "answer: {evidence: model}"), environ={}).evidence_threshold == 0.34
    assert load_config(write(tmp_path, "answer: {evidence: sentence}"), environ={}).evidence_threshold == 0.58
    assert load_config(write(tmp_path, "answer: {evidence: sentence, threshold: 0.3}"),
                       environ={}).evidence_threshold == 0.3
    # the fitted selection's threshold is in confidence units: the model's own unless set
    from transforms.query.selection import default_model
    assert load_config(write(tmp_path, "answer: {selection: model}"), environ={}).evidence_threshold == \
        default_model().threshold
    assert load_config(write(tmp_path, "answer: {selection: model, threshold: 0.3}"),
                       environ={}).evidence_threshold == 0.3


def test_unset_fusion_and_evidence_settings_are_the_embedding_profiles_fit(tmp_path):
    from transforms.ingest.profiles import PROFILES
    base = load_config(write(tmp_path, ""), environ={})
    assert (base.fusion_alpha, base.fusion_norm, base.evidence_threshold) == (0.82, "bound", 0.34)
    assert base.evidence_model == PROFILES["minilm"].fit.evidence_model
    for name in ("bge-small", "e5-small"):
        fit = PROFILES[name].fit
        c = load_config(write(tmp_path, f"embed: {{profile: {name}}}"), environ={})
        assert (c.fusion_alpha, c.fusion_norm, c.evidence_threshold, c.evidence_model, c.lexical_weight,
                c.max_sentences) == (fit.fusion_alpha, fit.fusion_norm, fit.evidence_threshold, fit.evidence_model,
                                     fit.lexical_weight, fit.max_sentences)
        assert fit != PROFILES["minilm"].fit  # fitted on its own scores
    # a value the config sets wins over the profile's
    c = load_config(write(tmp_path, "embed: {profile: e5-small}\nretrieve: {fusion_alpha: 0.5, fusion_norm: minmax}\n"
                                    "answer: {threshold: 0.7, max_sentences: 3}"), environ={})
    assert (c.fusion_alpha, c.fusion_norm, c.evidence_threshold, c.max_sentences) == (0.5, "minmax", 0.7, 3)
    assert load_config(write(tmp_path, "embed: {profile: e5-small}\nanswer: {evidence: sentence}"),
                       environ={}).evidence_model is None
    with pytest.raises(ConfigError, match="answer.evidence"):
        load_config(write(tmp_path, "answer: {evidence: vibes}"), environ={})


EXAMPLE_ENV = {"AWS_ACCESS_KEY_ID": "AKIA-example", "AWS_SECRET_ACCESS_KEY": "example-secret",
               "RAGBEAM_S3_ENDPOINT": "http://127.0.0.1:8333"}


def _example_expectations():
    """Per shipped config: the values it exists to set (what a user copies it for)."""
    return {
        "default.yaml": lambda c: [
            (c.runner.name, "DirectRunner"), (c.runner.direct_running_mode, "in_memory"),
            (c.source.full_hash, False), ((c.chunk.chunk_tokens, c.chunk.overlap_tokens, c.chunk.context_tokens),
                                          (200, 32, 40)),
            (c.contextualize.kind, "title_path"), (c.embed.batch_size, 8), (c.artifacts.build, True),
            (c.index.keep_versions, 3), (c.retrieve.mode, "auto"), (c.retrieve.rrf_k, 60),
            (c.rerank.kind, "none"), (c.answer.kind, "extractive"), (c.answer.evidence, "model"),
            (c.answer.threshold, None), (c.evidence_threshold, 0.34),
            (c.answer.max_sentences, None), (c.max_sentences, 3), (c.answer.gap, 0.12), (c.answer.same_source_bonus, 0.1), (c.retrieve.fusion, "convex"),
            (c.retrieve.fusion_alpha, None), (c.fusion_alpha, 0.82), (c.fusion_norm, "bound"),
            (c.output.format, "jsonl"), (c.output.retrieved_top_k, 10), (c.gate, None),
            (c.s3.endpoint_url, None), (c.s3.access_key_id, None)],
        "eval-rerank.yaml": lambda c: [
            (c.runner.name, "DirectRunner"), (c.runner.direct_running_mode, "in_memory"),
            (c.rerank.kind, "embedding"), (c.answer.threshold, None), (c.evidence_threshold, 0.34)],
        "flink-local.yaml": lambda c: [
            (c.runner.name, "PortableRunner"),
            (c.runner.options, {"job_endpoint": "localhost:8099", "environment_type": "PROCESS",
                                "environment_config": '{"command": "infra/flink/sdk-boot.sh"}', "parallelism": 2}),
            (c.embed.batch_size, 8)],
        "local-s3.yaml": lambda c: [
            (c.runner.name, "DirectRunner"), (c.s3.endpoint_url, "http://127.0.0.1:8333"),
            (c.s3.region, "us-east-1"),  # ${AWS_REGION:-us-east-1} with AWS_REGION unset
            (c.s3.access_key_id, "AKIA-example"), (c.s3.secret_access_key, "example-secret")],
        "s3-dataflow.example.yaml": lambda c: [
            (c.runner.name, "DataflowRunner"),
            (c.runner.options, {"project": "my-gcp-project", "region": "europe-west1",
                                "temp_location": "gs://my-bucket/tmp", "setup_file": "./setup.py",
                                "max_num_workers": 20}),
            (c.s3.endpoint_url, "http://127.0.0.1:8333"), (c.s3.region, "us-east-1"),
            (c.s3.access_key_id, "AKIA-example"), (c.s3.secret_access_key, "example-secret"),
            ((c.embed.batch_size, c.embed.intra_op_threads), (64, 1))],
        "local-llm.yaml": lambda c: [
            (c.answer.kind, "openai"), (c.answer.model, "smollm2-135m-instruct-q4_1"),
            ((c.answer.concurrency, c.answer.top_chunks, c.answer.max_tokens), (4, 3, 160))],
    }


def test_example_configs_validate():
    expectations = _example_expectations()
    shipped = sorted(p.name for p in DEFAULT_CONFIG.parent.glob("*.yaml"))
    assert shipped == sorted(expectations), "a shipped config without expectations here (or one gone)"
    for name in shipped:
        cfg = load_config(DEFAULT_CONFIG.parent / name, environ=EXAMPLE_ENV)
        for got, want in expectations[name](cfg):
            assert got == want, (name, got, want)


def test_example_configs_name_the_variables_they_need():
    # The S3 examples take their keys from the environment: without them they do not load,
    # and the error names the key and the variable.
    with pytest.raises(ConfigError, match="s3.access_key_id: environment variable AWS_ACCESS_KEY_ID is not set"):
        load_config(DEFAULT_CONFIG.parent / "local-s3.yaml",
                    environ={"RAGBEAM_S3_ENDPOINT": "http://x", "AWS_SECRET_ACCESS_KEY": "s"})
    # The Dataflow example falls back to AWS itself (no endpoint) when none is given.
    cfg = load_config(DEFAULT_CONFIG.parent / "s3-dataflow.example.yaml",
                      environ={"AWS_ACCESS_KEY_ID": "AKIA-dataflow", "AWS_SECRET_ACCESS_KEY": "dataflow-secret"})
    from transforms.common.s3 import settings_from_config
    assert cfg.s3.endpoint_url == "" and settings_from_config(cfg).endpoint_url is None
    assert cfg.s3.secret_access_key == "dataflow-secret"
    for text in (repr(cfg), str(cfg), repr(settings_from_config(cfg))):  # keys are masked in reprs
        assert "dataflow-secret" not in text and "AKIA-dataflow" not in text


def test_hnsw_settings_of_older_configs_are_refused_with_what_became_of_them(tmp_path):
    from configs.schema import ConfigError, load_config
    with pytest.raises(ConfigError, match=r"retrieve\.mode: Input should be 'auto', 'exact' or 'ann' \(got 'hnsw'\)"):
        load_config(environ={"RAGBEAM__RETRIEVE__MODE": "hnsw"})
    old = tmp_path / "old.yaml"
    old.write_text("artifacts: {build: true, hnsw: {m: 16}, recall_sample: 200}\n")
    with pytest.raises(ConfigError) as e:
        load_config(str(old), environ={})
    lines = str(e.value).splitlines()
    assert len(lines) == 2 and all("segments are searched exactly" in l or "no recall to measure" in l
                                   for l in lines), lines
    assert lines[0].endswith("artifacts.hnsw: unknown key (removed with the DuckDB HNSW index: segments are "
                             "searched exactly; delete it)")
